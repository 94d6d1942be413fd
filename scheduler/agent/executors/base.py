"""What every executor shares: one attempt is one process group led by the shim, kept in a state file.

An executor runs the attempts the portal assigns to this node. ``start`` launches an attempt, ``stop`` asks
it to end (the stop signal now, SIGKILL once the grace period is over), ``poll`` enforces time limits and
grace periods and reports the attempts that ended, and ``adopt`` takes over what a previous agent run
left. The executors differ only in *what* the shim starts and how a signal reaches the job (the hooks
at the end of ``Executor``): ``ProcessExecutor`` runs ``/bin/sh -c`` on the host, ``ContainerExecutor``
runs ``podman run`` of the job's image.

The shim (``shim.py``, a fork of the agent) leads a new session, so the attempt is one process group: an
attempt ends (and its GPUs may be released) only when no process of its group is left; until then the
agent does not reap the shim, whose pid keeps the group id from being reused. The records are kept in
``<work_dir>/agent-jobs.0`` and ``.1`` after every change (``statefile.py``), so an agent killed with
SIGKILL adopts its running jobs when it comes back, and learns from the shim's status file how the others
ended. Starting the shim and reading its status file are ``scheduler.agent.executors.launch``.
"""

from __future__ import annotations

import _signal
import json
import logging
import os
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from scheduler.agent import procs
from scheduler.agent.checkpoints import checkpoint_file, modified_at
from scheduler.agent.executors import identity
from scheduler.agent.executors.identity import Identity, IdentityRefused
from scheduler.agent.executors.launch import (
    INHERITED_ENV,
    STOP_SIGNALS,
    Launch,
    rota_env,
    shim_outcome,
    shim_spawn,
    visible_devices,
)
from scheduler.agent.executors.statefile import StateFile
from scheduler.agent.gpu.base import utc_now
from scheduler.agent.jobs import (
    RUNNING,
    STOP_LEFTOVERS,
    STOP_REQUESTED,
    STOP_TIME_LIMIT,
    STOP_UNHEALTHY,
    STOPPING,
    UNHEALTHY,
    Assignment,
    JobEvent,
    JobRecord,
    job_key,
)
from scheduler.agent.shim import Shim
from scheduler.agent.wire import iso

log = logging.getLogger(__name__)
STATE_FILE = "agent-jobs"  # the slots .0 and .1 (statefile.py); .json before them
FINISHED_KEPT = 500


class Executor:
    """Starts, watches and stops the job attempts of one node. Subclasses fill in the hooks at the end."""

    name = ""
    isolates = False  # True when a job cannot reach the node, other jobs or unallocated GPUs

    def __init__(
        self,
        work_dir: str | Path,
        *,
        clock: Callable[[], float] = time.time,
        base_env: Mapping[str, str] | None = None,
        allow_run_as_self: bool = False,
    ) -> None:
        """Use ``work_dir`` for job directories, logs and the state file (created if missing).

        ``allow_run_as_self`` (a laptop demo's ``--dev-run-as-self``) lets an agent that is not root run a
        team's job as its own user instead of refusing it.
        """
        self.work_dir = identity.prepare_work_dir(Path(work_dir).resolve())
        self.allow_run_as_self = allow_run_as_self
        self._clock = clock
        source = os.environ if base_env is None else base_env
        self._base_env = {k: source[k] for k in INHERITED_ENV if k in source}
        self.jobs: dict[str, JobRecord] = {}
        self.finished: dict[str, float] = {}  # attempts that ended here, so they are never started twice
        self._finished_json: str | None = None  # ``finished`` as the state file holds it (None: to write)
        self.unreported: dict[str, JobEvent] = {}  # end events the portal has not acknowledged yet
        self._shims: dict[str, Shim] = {}  # the shims this agent forked, reaped once their group is gone
        self.state = StateFile(self.work_dir, STATE_FILE)
        self._boot_id = procs.boot_id()

    # persistence ------------------------------------------------------------------------------------

    def describe(self) -> dict[str, object]:
        """The register body's ``executor``: name, whether it isolates tenants, runtime, a line of detail."""
        return {"name": self.name, "isolates": self.isolates, "runtime": "", "detail": ""}

    def read_state(self) -> dict | None:
        """The job records as the last save left them between agent runs (None: none saved)."""
        return self.state.read()

    def save(self) -> None:
        """Write the records, whole or not at all (``statefile.py``), after every change: a busy node writes
        them three or four times a job. The attempts that ended here are most of it (up to ``FINISHED_KEPT``
        and a tenth, the oldest dropped then) and change only when one ends (``_ended_here``): their JSON is
        kept from one save to the next until then. With them written anew and each record and event
        deep-copied (``dataclasses.asdict``), a save took ~1 ms of CPU (0.4 then: bench/README.md, "The
        register storm profiled"), and a new file renamed over the old one 0.2-2 ms more of waiting."""
        if len(self.finished) > FINISHED_KEPT * 11 // 10:
            self.finished = dict(sorted(self.finished.items(), key=lambda item: item[1])[-FINISHED_KEPT:])
            self._finished_json = None
        if self._finished_json is None:
            self._finished_json = _compact(self.finished)
        jobs = _compact([job.to_json() for job in self.jobs.values()])
        unreported = _compact([event.to_json() for event in self.unreported.values()])
        self.state.write(f'{{"jobs":{jobs},"finished":{self._finished_json},"unreported":{unreported}}}')

    def _ended_here(self, key: str) -> None:
        """Remember that attempt ``key`` ended on this node (it is never started here again)."""
        self.finished[key] = self._clock()
        self._finished_json = None

    def adopt(self) -> list[JobEvent]:
        """Load the records left by a previous agent run.

        Attempts whose process group still runs are adopted as they are; the others ended while no agent
        watched them. Returns the end events the portal has not acknowledged, older ones included.
        """
        try:
            data = self.read_state()
        except (OSError, ValueError) as error:
            log.error("state file in %s unreadable, starting empty: %s", self.work_dir, error)
            return []
        if data is None:
            return []
        self.finished = {str(k): float(v) for k, v in data.get("finished", {}).items()}
        self._finished_json = None
        for raw_event in data.get("unreported", []):
            event = JobEvent(**raw_event)
            self.unreported[job_key(event.job_id, event.attempt)] = event
        for raw in data.get("jobs", []):
            job = JobRecord.from_json(raw)
            self.jobs[job.key] = job
            if job.boot_id == self._boot_id and self._alive(job):
                log.info("adopted job %s (pid %d, %s)", job.key, job.pid, job.state)
            else:
                self._finish(job)
        self.save()
        return list(self.unreported.values())

    # starting ---------------------------------------------------------------------------------------

    def job_env(self, assignment: Assignment) -> dict[str, str]:
        """The job's environment: a few of the agent's variables, the assignment's, then Rota's own."""
        return {**self._base_env, **rota_env(assignment)}

    def start(self, assignment: Assignment) -> JobEvent:
        """Start an attempt; returns its ``started`` or ``start_failed`` event."""
        key = assignment.key
        if not assignment.command.strip():
            return self.start_failed(assignment, "empty command")
        bad = next((name for name in assignment.env if not name or "=" in name or "\0" in name), None)
        if bad is not None:
            return self.start_failed(assignment, f"invalid environment variable name {bad!r}")
        try:
            who = identity.job_identity(assignment.run_as, allow_self=self.allow_run_as_self)
        except IdentityRefused as error:
            return self.start_failed(assignment, str(error))
        refusal = self._refuse(assignment)
        if refusal is not None:
            return self.start_failed(assignment, refusal[1], reason=refusal[0])
        job_dir = self.work_dir / "jobs" / str(assignment.job_id)
        log_path = self.work_dir / "logs" / f"{assignment.job_id}-{assignment.attempt}.log"
        status_path = self.work_dir / "run" / f"{assignment.job_id}-{assignment.attempt}.status"
        blocked = _signal.pthread_sigmask(_signal.SIG_BLOCK, STOP_SIGNALS)  # the shim unblocks them
        try:
            identity.private_dir(job_dir, who)
            identity.private_file(log_path, who)
            status_path.unlink(missing_ok=True)
            checkpoint_before = modified_at(checkpoint_file(job_dir))  # an earlier attempt's, if any
            launch = self._launch(assignment, job_dir, who)
            shim = shim_spawn(launch, status_path=status_path, job_dir=job_dir, log_path=log_path)
        except Exception as error:  # whatever it is (a NUL in the env: ValueError), it fails this attempt
            self._abandon(assignment)
            return self.start_failed(assignment, f"cannot start: {error}")
        finally:
            _signal.pthread_sigmask(_signal.SIG_SETMASK, blocked)  # _signal's: signal's builds enums (~50 us)
        stat = procs.read_stat(shim.pid)
        job = JobRecord(
            job_id=assignment.job_id,
            attempt=assignment.attempt,
            pid=shim.pid,
            start_ticks=stat.start_ticks if stat else None,
            boot_id=self._boot_id,
            log_path=str(log_path),
            status_path=str(status_path),
            started_at=self._clock(),
            checkpoint_before=checkpoint_before,
            gpus=[gpu.uuid for gpu in assignment.gpus],
            time_limit_s=assignment.time_limit_s,
            grace_period_s=assignment.grace_period_s,
            kind=assignment.kind,
            uid=who.uid,
            container=launch.container,
            memory_mb=assignment.limits.memory_mb,
        )
        self.jobs[key] = job
        self._shims[key] = shim
        self.save()
        log.info("started job %s as pid %d on GPUs %s", key, shim.pid, visible_devices(assignment) or "-")
        notes = "; ".join(note for note in (who.note, *launch.notes) if note)
        shim.lead()  # the bookkeeping above went on while it got there: its group exists before any stop
        return JobEvent(job.job_id, job.attempt, "started", iso(utc_now()), pid=shim.pid, message=notes)

    def never_started(self, assignment: Assignment) -> JobEvent:
        """End an attempt the portal stopped before this node started it (kept until acknowledged)."""
        event = JobEvent(
            assignment.job_id,
            assignment.attempt,
            "exited",
            iso(utc_now()),
            message="stopped before it started",
        )
        self._ended_here(assignment.key)
        self.unreported[assignment.key] = event
        self.save()
        return event

    def start_failed(self, assignment: Assignment, message: str, reason: str = "") -> JobEvent:
        """Record that an attempt could not start here (it is never tried again); returns its event."""
        log.warning("job %s failed to start: %s", assignment.key, message)
        event = JobEvent(
            assignment.job_id,
            assignment.attempt,
            "start_failed",
            iso(utc_now()),
            message=message,
            reason=reason,
        )
        self._ended_here(assignment.key)
        self.unreported[assignment.key] = event
        self.save()
        return event

    # stopping ---------------------------------------------------------------------------------------

    def stop(
        self, key: str, cause: str = STOP_REQUESTED, message: str = "", grace_s: float | None = None
    ) -> None:
        """Ask an attempt to stop: SIGTERM to its group now, SIGKILL once the grace period is over."""
        job = self.jobs.get(key)
        if job is None or job.state == STOPPING:
            return
        job.state, job.stop_cause, job.stop_message = STOPPING, cause, message
        job.term_sent_at = self._clock()
        if grace_s is not None:
            job.grace_period_s = grace_s
        log.info("stopping job %s (%s), grace %.1f s", key, message or cause, job.grace_period_s)
        self._deliver(job, signal.SIGTERM)
        self.save()

    def stop_all(self, cause: str, message: str) -> None:
        """Stop every attempt on the node (portal lost, agent shutting down)."""
        for key in list(self.jobs):
            self.stop(key, cause, message)

    # watching ---------------------------------------------------------------------------------------

    def poll(self) -> list[JobEvent]:
        """Enforce time limits and grace periods; returns the end events of attempts whose group is gone,
        saved once for all of them before they are returned (and so before any is reported): a crash before
        that save finds each of them ended on restart, as if this pass had not run."""
        events = []
        now = self._clock()
        for key, job in list(self.jobs.items()):
            if not self._alive(job):
                events.append(self._finish(job))
                continue
            if job.state == RUNNING:
                if job.time_limit_s is not None and now - job.started_at >= job.time_limit_s:
                    limit = f"{job.time_limit_s:g}"
                    self.stop(key, STOP_TIME_LIMIT, f"timed-out: exceeded its time limit of {limit} s")
                elif not self._leader_alive(job):
                    self.stop(key, STOP_LEFTOVERS, "the command ended; stopping processes it left behind")
            elif job.term_sent_at is not None and now - job.term_sent_at >= job.grace_period_s:
                if not job.killed:
                    log.warning("job %s outlived its grace period; SIGKILL to its group", key)
                    job.killed = True
                    self.save()
                self._deliver(job, signal.SIGKILL)
        if events:
            self.save()
        return events

    def _leader_alive(self, job: JobRecord) -> bool:
        if job.key in self._shims:
            return not procs.child_exited(job.pid)
        return procs.leader_alive(job.pid, job.start_ticks)

    def _finish(self, job: JobRecord) -> JobEvent:
        """Forget an attempt whose group is gone and describe how it ended (the caller saves)."""
        shim = self._shims.pop(job.key, None)
        returncode = shim.wait() if shim is not None else None  # reap the shim only now
        exit_code, signum, message, started = shim_outcome(job, returncode)
        exit_code, signum, message, reason, started = self._ended(job, exit_code, signum, message, started)
        del self.jobs[job.key]
        self._ended_here(job.key)
        exits = (None, STOP_REQUESTED, STOP_LEFTOVERS, STOP_UNHEALTHY)  # the rest: the agent's own stops
        kind = "exited" if job.stop_cause in exits else "stopped"
        if not started:
            kind = "start_failed"
        elif job.stop_cause == STOP_REQUESTED:
            message = message or "stopped on request"
        elif job.stop_cause != STOP_LEFTOVERS:
            message = job.stop_message or message
        log.info("job %s %s: exit code %s, signal %s %s", job.key, kind, exit_code, signum, message)
        event = JobEvent(
            job.job_id,
            job.attempt,
            kind,
            iso(utc_now()),
            pid=job.pid,
            exit_code=exit_code,
            signal=signum,
            message=message,
            log_path=job.log_path,
            log_offset=job.log_offset,
            reason=reason or (UNHEALTHY if job.stop_cause == STOP_UNHEALTHY else ""),
        )
        self.unreported[job.key] = event
        return event

    # views ------------------------------------------------------------------------------------------

    def running(self) -> list[dict[str, object]]:
        """The heartbeat's ``running`` list: every attempt with a process left, stopping ones included."""
        return [
            {"job_id": job.job_id, "attempt": job.attempt, "pid": job.pid, "state": job.state}
            for job in self.jobs.values()
        ]

    def busy_gpus(self) -> dict[str, int]:
        """Device uuid -> leader pid of the attempt holding it."""
        return {uuid: job.pid for job in self.jobs.values() for uuid in job.gpus}

    def set_log_offset(self, key: str, offset: int) -> None:
        """Record that the portal holds the log of ``key`` up to ``offset`` bytes."""
        job = self.jobs.get(key)
        if job is not None and job.log_offset != offset:
            job.log_offset = offset
            self.save()

    def acknowledge(self, *events: JobEvent) -> None:
        """The portal has these end events (or refused them for good): stop keeping them for a resend."""
        ends = (e for e in events if e.type not in ("started", "checkpoint"))
        keys = {job_key(e.job_id, e.attempt) for e in ends} & self.unreported.keys()
        for key in keys:
            del self.unreported[key]
        if keys:
            self.save()

    def update_unreported(self, event: JobEvent) -> None:
        """Keep the progress of an end event's log upload (its ``log_offset``) across restarts."""
        key = job_key(event.job_id, event.attempt)
        if key in self.unreported:
            self.unreported[key] = event
            self.save()

    def has_run(self, job_id: int, attempt: int) -> bool:
        """True when this attempt runs here now or already ended here."""
        key = job_key(job_id, attempt)
        return key in self.jobs or key in self.finished

    # the hooks an executor fills in --------------------------------------------------------------------

    def _refuse(self, assignment: Assignment) -> tuple[str, str] | None:
        """``(reason, message)`` when this executor cannot start the attempt at all; None to go on."""
        return None

    def _launch(self, assignment: Assignment, job_dir: Path, who: Identity) -> Launch:
        """What the shim starts for this attempt, as whom, with which environment."""
        raise NotImplementedError

    def _abandon(self, assignment: Assignment) -> None:
        """Undo what ``_launch`` prepared for an attempt that then failed to start."""

    def _deliver(self, job: JobRecord, signum: int) -> None:
        """Send a stop signal (SIGTERM, then SIGKILL) to every process of the attempt."""
        if job.key in self._shims or procs.group_members(job.pid):  # never signal a reused group id
            procs.signal_group(job.pid, signum)

    def _alive(self, job: JobRecord) -> bool:
        """True while any process of the attempt is left: its shim (our child) running says so without a walk
        over every process of the host (asked at every pass); once the shim ended, any process it left."""
        shim_runs = job.key in self._shims and not procs.child_exited(job.pid)
        return shim_runs or bool(procs.group_members(job.pid))

    def _ended(
        self, job: JobRecord, exit_code: int | None, signum: int | None, message: str, started: bool
    ) -> tuple[int | None, int | None, str, str, bool]:
        """Refine the shim's outcome once the attempt is gone: ``(exit code, signal, message, reason,
        started)``; the place to clean up what the attempt left."""
        return exit_code, signum, message, "", started


def _compact(value) -> str:
    """``value`` as compact JSON, as the state file holds it."""
    return json.dumps(value, separators=(",", ":"))
