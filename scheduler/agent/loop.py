"""The reconcile loop: register, then heartbeat, and make the node run exactly what the portal assigns.

Level-triggered (DESIGN.md, principle 3): every heartbeat answer lists all the attempts that should run
here; the agent starts what is missing and stops what is not listed or listed as ``stopped``. Between
heartbeats it watches its jobs (exits, time limits, grace periods) and sends their events. When the
portal has not answered a heartbeat for ``heartbeat_timeout_s`` the agent stops all its jobs itself.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from scheduler.agent.checkpoints import checkpoints_then_ends
from scheduler.agent.client import (
    PortalClient,
    PortalError,
    PortalRejected,
    PortalUnavailable,
    RegisterRequired,
)
from scheduler.agent.executors import Executor, ProcessExecutor
from scheduler.agent.gpu.base import GpuBackend, utc_now
from scheduler.agent.health import DEFAULT_MAX_TEMPERATURE_C, HealthTracker
from scheduler.agent.jobs import (
    STOP_PORTAL_LOST,
    STOP_REQUESTED,
    STOP_SHUTDOWN,
    Assignment,
    AssignmentError,
    JobEvent,
    job_key,
)
from scheduler.agent.logship import ship_log
from scheduler.agent.outbox import flush_outbox
from scheduler.agent.probes import HealthProbes, ProbeSettings
from scheduler.agent.wakeups import Wakeups
from scheduler.agent.wire import iso, register_body, stamp, telemetry_entries

# Answers cross in flight by a second or so at most (the agent's two threads); one older than the last
# applied by more than this comes from a portal whose clock stepped back (a database failover): applied.
CLOCK_STEP = timedelta(seconds=60)
log = logging.getLogger(__name__)
AGENT_STATE_FILE = "agent.json"
MAX_TELEMETRY_BUFFER = 4000  # rows kept while the portal is away; the oldest go first
MAX_TELEMETRY_BATCH = 500  # rows per heartbeat
MAX_REGISTER_BACKOFF_S = 30.0


@dataclass(frozen=True, slots=True)
class AgentConfig:
    """Settings of one agent. Times in seconds.

    ``interval_s`` is used until the portal names its own heartbeat interval; ``heartbeat_timeout_s``
    likewise (it is how long the agent keeps its jobs without hearing from the portal).
    """

    work_dir: Path
    interval_s: float = 2.0
    heartbeat_timeout_s: float = 30.0
    max_temperature_c: int = DEFAULT_MAX_TEMPERATURE_C
    hostname: str | None = None
    service_address: str | None = None  # host the portal reaches this node's services on (--service-address)
    probes: ProbeSettings = ProbeSettings()  # health probes of its services (scheduler/agent/probes.py)


class Agent:
    """One node's agent: a GPU backend, an executor and a portal client, driven by ``run``."""

    def __init__(
        self,
        config: AgentConfig,
        *,
        backend: GpuBackend,
        client: PortalClient,
        executor: Executor | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Wire the parts together; nothing talks to the portal before ``run`` (or ``register``)."""
        self.config = config
        self.backend = backend
        self.client = client
        self.executor = executor or ProcessExecutor(config.work_dir)
        self._clock = clock
        self.node = config.hostname or backend.system_info().hostname
        self.interval_s = config.interval_s
        self.timeout_s = config.heartbeat_timeout_s
        self.registered = False
        self.seq = 0
        self.outbox: collections.deque[JobEvent] = collections.deque()
        self.telemetry: list[dict[str, Any]] = []
        self.devices = backend.discover()
        self.health = HealthTracker(self.devices, max_temperature_c=config.max_temperature_c)
        self.probes = HealthProbes(config.service_address, config.probes, clock=clock)
        self.last_contact = clock()
        self.portal_lost = False
        self.shutting_down = False
        self._next_heartbeat = 0.0
        self._spread_next_beat = False  # set by a register: the beat after the next comes at a random phase
        self.phase = random.random  # where in its interval that beat comes, a fraction in [0, 1)
        self._next_sample = 0.0  # GPUs are sampled once an interval, not at every heartbeat news brings
        self._next_register = 0.0
        self._register_backoff = 1.0
        self._failures = 0
        self._as_of: datetime | None = None  # the portal's stamp of the newest assignments applied
        self.wakeups: Wakeups | None = None  # made by ``run``: the portal's news and jobs' ends wake the loop
        self._load_state()

    # persistence ------------------------------------------------------------------------------------

    @property
    def _state_path(self) -> Path:
        return Path(self.config.work_dir) / AGENT_STATE_FILE

    def _load_state(self) -> None:
        """Resume ``seq`` (never replay one) and the last known timeout from the previous run."""
        try:
            data = json.loads(self._state_path.read_text())
            self.seq = int(data.get("seq", 0))
            self.timeout_s = float(data.get("heartbeat_timeout_s", self.timeout_s))
        except (OSError, ValueError):
            pass

    def _save_state(self) -> None:
        temporary = self._state_path.with_suffix(".tmp")
        with open(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as handle:
            handle.write(json.dumps({"seq": self.seq, "heartbeat_timeout_s": self.timeout_s}))
        temporary.replace(self._state_path)

    # talking to the portal --------------------------------------------------------------------------

    def register(self) -> bool:
        """Register (again); True on success. Failures are logged and retried with a growing delay."""
        self.devices = self.backend.discover()
        self.health.track(self.devices)
        body = register_body(self.backend.system_info(), self.devices, self.backend.kind)
        body["executor"] = self.executor.describe()
        if self.config.hostname:
            body["hostname"] = self.config.hostname
        try:
            answer = self.client.register(body)
        except PortalError as error:
            log.warning("register failed (retrying in %.0f s): %s", self._register_backoff, error)
            self._next_register = self._clock() + self._register_backoff
            self._register_backoff = min(self._register_backoff * 2, MAX_REGISTER_BACKOFF_S)
            return False
        self.node = str(answer.get("node") or self.node)
        self._follow_cadence(answer)
        self.registered, self._register_backoff = True, 1.0
        self._spread_next_beat = True
        self._as_of = None  # a new sequence of answers (the portal's clock may have moved back since)
        self._contact()
        self._save_state()
        log.info(
            "registered as %s with %d GPUs (heartbeat every %g s)",
            self.node,
            len(self.devices),
            self.interval_s,
        )
        return True

    def _follow_cadence(self, answer: dict[str, Any]) -> None:
        """Heartbeat as often, and keep jobs without an answer as long, as the portal's latest answer says: it
        lengthens both as its fleet grows (and the timeout is what it judges this node's liveness by)."""
        self.interval_s = float(answer.get("heartbeat_interval_s") or self.interval_s)
        timeout_s = float(answer.get("heartbeat_timeout_s") or self.timeout_s)
        if timeout_s != self.timeout_s:
            self.timeout_s = timeout_s
            self._save_state()
        if self._next_heartbeat > self._clock() + self.interval_s:  # shorter: no need to wait out the old one
            self._next_heartbeat = self._clock() + self.interval_s

    def _until_next_beat(self) -> float:
        """Seconds from this heartbeat to the next: the interval, but after the first heartbeat since a
        register a random part of it. Nodes that registered together (a portal restarted, a network healed, a
        fleet booted) would otherwise heartbeat together at every interval, in a herd the portal's heartbeat
        budget (``scheduler/services/node_cadence.py``) does not allow for: at the full size 260 of 500 in
        3 s, the portal's heartbeat p99 0.3-0.5 s (bench/README.md, "Workers that start warm, and a fleet that
        registers at once"). From the second beat on they are spread across the interval. A shorter gap, never
        a longer one: the node's deadline is kept."""
        if self._spread_next_beat:
            self._spread_next_beat = False
            return self.interval_s * self.phase()
        return self.interval_s

    def _contact(self) -> None:
        self.last_contact = self._clock()
        if self.portal_lost:
            log.info("the portal is back")
        self.portal_lost = False

    def heartbeat(self) -> bool:
        """Sample the GPUs (once an interval), send a heartbeat, act on its assignments; True if answered."""
        if self._clock() >= self._next_sample:
            self._next_sample = self._clock() + self.interval_s
            samples, events = self.backend.sample(), self.backend.events()
            xids = self.health.observe(samples, events)
            self.telemetry.extend(telemetry_entries(samples, xids))
            del self.telemetry[:-MAX_TELEMETRY_BUFFER]
        batch = self.telemetry[:MAX_TELEMETRY_BATCH]
        self.seq += 1
        self._save_state()
        body = {
            "seq": self.seq,
            "running": self.probes.annotate(self.executor.running()),
            "gpus": self.health.report(),
            "telemetry": batch,
        }
        try:
            answer = self.client.heartbeat(body)
        except RegisterRequired:
            log.info("the portal asks this node to register again")
            self.registered = False
            return False
        except PortalUnavailable as error:
            self._failures += 1
            level = logging.WARNING if self._failures % 15 == 1 else logging.DEBUG  # not every 2 s
            log.log(level, "heartbeat %d failed (%d in a row): %s", self.seq, self._failures, error)
            return False
        except PortalRejected as error:
            log.error("heartbeat %d refused: %s", self.seq, error)
            if error.status == 409:  # a seq the portal has seen: registering starts a new sequence
                self.registered = False
            elif error.status in (400, 413):
                del self.telemetry[: len(batch)]  # do not resend a batch the portal cannot take
                if error.field == "gpus":  # the portal knows other GPUs than we report: resync
                    self.registered = False
            return False
        self._contact()
        self._failures = 0
        del self.telemetry[: len(batch)]
        self._follow_cadence(answer)
        self.apply(answer)
        return True

    def apply(self, answer: dict[str, Any]) -> bool:
        """Reconcile with an answer's assignments (a heartbeat's, or those a long-poll brought), unless the
        portal read a newer state for an answer applied already (its ``as_of``: the two threads' answers can
        arrive out of order). False when it was older."""
        as_of = stamp(answer.get("as_of"))
        if as_of is not None and self._as_of is not None and self._as_of - CLOCK_STEP < as_of <= self._as_of:
            log.debug("ignoring assignments as of %s: those as of %s were applied", as_of, self._as_of)
            return False
        self._as_of = as_of or self._as_of
        self.reconcile(answer.get("assignments") or [])
        return True

    def reconcile(self, assignments: list[Any]) -> None:
        """Start the listed attempts that do not run yet; stop running ones not listed or desired stopped."""
        listed: set[str] = set()
        for raw in assignments:
            try:
                assignment = Assignment.from_wire(raw)
            except AssignmentError as error:
                log.error("ignoring an assignment: %s: %r", error, raw)
                if isinstance(raw, dict) and isinstance(raw.get("job_id"), int):
                    listed.add(job_key(raw["job_id"], raw.get("attempt", 0)))  # keep it running if it does
                continue
            listed.add(assignment.key)
            if assignment.desired == "running":
                self.probes.watch(assignment)
            if assignment.desired == "stopped":
                if self.executor.has_run(assignment.job_id, assignment.attempt):
                    self.executor.stop(assignment.key, STOP_REQUESTED, grace_s=assignment.grace_period_s)
                else:  # stopped before it ever started here: the portal still waits to hear it ended
                    self.outbox.append(self.executor.never_started(assignment))
            elif not self.shutting_down and not self.executor.has_run(assignment.job_id, assignment.attempt):
                self.outbox.append(self._start(assignment))
        for key in list(self.executor.jobs):
            if key not in listed:
                self.executor.stop(key, STOP_REQUESTED, "no longer assigned to this node")

    def _start(self, assignment: Assignment) -> JobEvent:
        """Start one attempt. Whatever goes wrong fails that attempt alone, never the pass: the other jobs
        of the node still start, and the portal hears ``start_failed`` with the error."""
        try:
            return self._with_address(self.executor.start(assignment), assignment)
        except Exception as error:
            log.exception("job %s could not be started", assignment.key)
            job = self.executor.jobs.get(assignment.key)
            if job is not None:  # its processes run (what failed came after): it is watched like any other
                started = JobEvent(job.job_id, job.attempt, "started", iso(utc_now()), pid=job.pid)
                return self._with_address(started, assignment)
            message = f"cannot start: {error.__class__.__name__}: {error}"
            return self.executor.start_failed(assignment, message)

    def _with_address(self, event: JobEvent, assignment: Assignment) -> JobEvent:
        """A ``started`` event of a job that listens (its assignment names a port) carries the address the
        portal's gateway reaches it on: this node's ``service_address`` and that port; and, when this agent
        probes its health, ``starting`` (no traffic until a probe succeeds)."""
        if event.type != "started" or not assignment.port:
            return event
        health = "starting" if self.probes.path_of(assignment) else ""
        address = f"{self.config.service_address}:{assignment.port}" if self.config.service_address else ""
        return dataclasses.replace(event, address=address, health=health)

    def flush_outbox(self) -> None:
        """Send queued job events in order, many per request; an end event first sends the rest of its log."""
        if not flush_outbox(self.outbox, self.client, self.executor):
            self.registered = False

    def ship_logs(self) -> None:
        """Send what running jobs wrote since the last heartbeat."""
        for job in list(self.executor.jobs.values()):
            try:
                ship_log(
                    self.client,
                    job.job_id,
                    job.attempt,
                    job.log_path,
                    job.log_offset,
                    progress=lambda offset, key=job.key: self.executor.set_log_offset(key, offset),
                )
            except RegisterRequired:
                self.registered = False
                return
            except PortalUnavailable:
                return
            except PortalRejected as error:
                log.debug("log of job %s refused: %s", job.key, error)
                if error.status == 409 and error.field == "offset":  # the portal holds less than we thought
                    self.executor.set_log_offset(job.key, 0)

    # local supervision ------------------------------------------------------------------------------

    def supervise(self) -> None:
        """Watch the jobs: queue checkpoints and end events, enforce time limits, tell the backend which GPUs
        are busy. A checkpoint goes before the end of its attempt (a job saves its work, then exits)."""
        events = checkpoints_then_ends(self.executor.jobs, self.executor.work_dir, self.executor.poll)
        if any(e.type == "checkpoint" for e in events):
            self.executor.save()  # what was reported, so a restarted agent does not report it again
        self.outbox.extend(events)
        self.probes.heal(self.executor)
        self.backend.set_busy(self.executor.busy_gpus())
        silent = self._clock() - self.last_contact
        if not self.portal_lost and silent >= self.timeout_s:
            self.portal_lost = True
            log.error("no answer from the portal for %.0f s: stopping all jobs on this node", silent)
            self.executor.stop_all(STOP_PORTAL_LOST, f"stopped: portal unreachable for {self.timeout_s:g} s")

    # driving ----------------------------------------------------------------------------------------

    def start(self) -> None:
        """Adopt what a previous run left (running jobs, unreported end events)."""
        self.outbox.extend(self.executor.adopt())

    def step(self) -> bool:
        """One pass: supervise, register if needed, heartbeat when due, send events. True if it beat."""
        self.supervise()
        beat = False
        now = self._clock()
        if not self.registered and now >= self._next_register:
            self.register()
        if self.registered and now >= self._next_heartbeat:
            self._next_heartbeat = now + self._until_next_beat()
            beat = self.heartbeat()
            if beat:
                self.ship_logs()
                self.supervise()  # ends that came while it started jobs go with the starts, in one request
        if self.registered:
            self.flush_outbox()
        return beat

    def run(self, stop: threading.Event, *, once: bool = False) -> bool:
        """Loop until ``stop`` is set, then stop the jobs gracefully. With ``once``: one heartbeat and return.

        Returns False when ``once`` could not reach the portal.
        """
        self.start()
        self.wakeups = wakeups = Wakeups()
        if not once:
            wakeups.catch_child_exits()
            threading.Thread(target=self.listen, args=(stop,), name="portal-news", daemon=True).start()
            threading.Thread(target=self.probes.loop, args=(stop,), name="health-probes", daemon=True).start()
        while not stop.is_set():
            try:
                beat = self.step()
            except Exception:  # a node agent must outlive a bad pass; the next one retries
                log.exception("agent pass failed")
                beat = False
            if once and (beat or not self.registered):
                return beat
            if wakeups.wait(min(0.25, self.interval_s / 4)):
                self.take_news(wakeups.delivery())
        self.shutdown()
        wakeups.close()
        return True

    def take_news(self, delivered: dict[str, Any] | None) -> None:
        """The portal said this node's assignments changed: act on those it delivered with the news, or,
        when it delivered none (or acting on them failed, or the portal is lost: only a heartbeat's answer
        ends that), heartbeat now: that answer says what changed."""
        if delivered is not None and not self.portal_lost:  # no contact recorded: liveness is the heartbeats'
            try:
                self.apply(delivered)
                return
            except Exception:  # a bad pass must not end the loop; the heartbeat's answer is the truth
                log.exception("acting on the assignments the long-poll brought failed")
        self._next_heartbeat = self._clock()

    def listen(self, stop: threading.Event) -> None:
        """Long-poll the portal (``POST /api/v1/node/wait/``) and wake the loop when it says this node's
        assignments changed, with them where the portal delivers them, so the loop starts or stops
        what changed at once instead of up to an interval later. A hint only: the heartbeats go on at
        their interval whatever happens here. A portal that cannot hold the request (``waited`` false)
        or fails is asked again an interval after the last ask."""
        while not stop.is_set():
            if not self.registered or self.portal_lost:
                stop.wait(self.interval_s)
                continue
            asked = self._clock()
            try:
                answer = self.client.wait(self.interval_s)
            except PortalError as error:
                log.debug("long-poll failed: %s", error)
                answer = {}
            if answer.get("news") and self.wakeups is not None:
                self.wakeups.news(answer if "assignments" in answer else None)
            else:  # never more than one empty answer an interval, whatever the portal does
                stop.wait(max(0.0, asked + self.interval_s - self._clock()))

    def shutdown(self) -> None:
        """Stop every job (SIGTERM, grace, SIGKILL), report their ends, send a last heartbeat."""
        self.shutting_down = True
        if self.executor.jobs:
            log.info("shutting down: stopping %d jobs", len(self.executor.jobs))
        self.executor.stop_all(STOP_SHUTDOWN, "stopped: the node agent is shutting down")
        longest = max((job.grace_period_s for job in self.executor.jobs.values()), default=0.0)
        deadline = self._clock() + longest + 5.0
        while self.executor.jobs and self._clock() < deadline:
            self.outbox.extend(self.executor.poll())
            time.sleep(0.05)
        self.outbox.extend(self.executor.poll())
        if self.registered:
            self.flush_outbox()
            self.heartbeat()
        self.backend.close()
        self.client.close()
