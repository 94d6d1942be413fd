"""Rota decides, Slurm launches: each poll the bridge hands a node's assignments (the heartbeat's answer) and
Slurm's view of Rota's jobs (``squeue``) to ``Launcher.reconcile``, which, level-triggered like the node
agent, submits what should run and does not (``sbatch``; never twice: the attempt's comment is looked up
first), reports starts and ends as the agent's job events, ships the output, stops what Rota asks to stop
(the grace signal first, then the kill) and cancels Rota's jobs that Rota no longer lists."""

from __future__ import annotations

import logging
import os
import pwd
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from scheduler.agent.client import PortalClient, PortalRejected, PortalUnavailable
from scheduler.agent.logship import ship_log
from scheduler.slurm.commands import Slurm, SlurmError
from scheduler.slurm.containers import SlurmContainers, container_end
from scheduler.slurm.jobs import Key, LaunchError, SlurmJob, batch_script, end_event, run_as, sbatch_argv

log = logging.getLogger(__name__)
RESEND_S = 5.0  # the shortest wait before a kill is sent again


@dataclass
class Attempt:
    """What the bridge has done about one attempt (kept in memory; after a restart Slurm's comment finds
    the job again and the portal ignores what it already has)."""

    slurm_id: int | None = None
    started: bool = False
    ended: bool = False
    log_offset: int = 0
    log_done: bool = False
    term_sent_at: float | None = None
    killed_at: float | None = None


class Launcher:
    """Runs the assignments of the bridge's Slurm nodes in Slurm; one per bridge."""

    def __init__(self, slurm: Slurm, output_dir: Path, *, partition: str | None = None,
                 clock: Callable[[], float] = time.monotonic, as_team: bool | None = None,
                 containers: SlurmContainers | None = None) -> None:
        self.slurm = slurm
        self.output_dir = output_dir
        self.partition = partition
        self.clock = clock
        # Only root may submit as another user: a bridge that is not root runs jobs as its own user, and says
        # so in its executor (the portal refuses it where isolation is required).
        self.as_team = os.geteuid() == 0 if as_team is None else as_team
        self.attempts: dict[Key, Attempt] = {}
        self.containers = containers  # each job in its image (root submits; podman runs it as the team's uid)
        if containers and not self.as_team:
            raise LaunchError("containers: only a bridge running as root can start jobs' containers")

    def executor(self) -> dict:
        """The register body's ``executor``: Slurm isolates tenants only when jobs run as their teams' uids."""
        if self.containers:
            return {"name": "slurm", "isolates": True, "runtime": "slurm+podman",
                    "detail": self.containers.describe()}
        how = ("each job runs as its team's uid (sbatch --uid) on the node's system; images are not used "
               "(--containers)" if self.as_team else "jobs run as the bridge's own user: run the bridge as root")
        return {"name": "slurm", "isolates": self.as_team, "runtime": "slurm", "detail": how}

    def output(self, key: Key) -> Path:
        return self.output_dir / f"rota-{key[0]}-{key[1]}.out"

    def running(self, node: str, jobs: dict[Key, SlurmJob]) -> list[dict]:
        """The heartbeat's ``running``: Rota's attempts Slurm holds on ``node``."""
        return [{"job_id": key[0], "attempt": key[1],
                 "state": "stopping" if self.attempts.get(key, Attempt()).term_sent_at else "running"}
                for key, job in sorted(jobs.items()) if job.active and job.on(node)]

    def reconcile(self, node: str, client: PortalClient, assignments: list[dict], jobs: dict[Key, SlurmJob],
                  gres_types: dict[str, str]) -> None:
        listed = set()
        for assignment in assignments:
            key = (int(assignment["job_id"]), int(assignment["attempt"]))
            listed.add(key)
            try:
                self._one(node, client, assignment, key, jobs.get(key), gres_types)
            except PortalUnavailable as error:
                log.warning("portal unavailable while reporting job %s: %s", key[0], error)
            except PortalRejected as error:  # not this node's to report any more: drop it
                log.info("the portal refused a report about job %s attempt %s: %s", key[0], key[1], error)
                self.attempts[key].ended = True
        for key, job in jobs.items():
            if job.active and job.on(node) and key not in listed:
                self._cancel(job, "no longer assigned by Rota")
        for key in [k for k, a in self.attempts.items() if a.ended and k not in listed]:
            del self.attempts[key]

    def _one(self, node: str, client: PortalClient, assignment: dict, key: Key, job: SlurmJob | None,
             gres_types: dict[str, str]) -> None:
        attempt = self.attempts.setdefault(key, Attempt())
        if attempt.ended:
            return  # reported; the portal drops it from the assignments
        stop = assignment.get("desired") == "stopped"
        if job is None:
            if attempt.slurm_id is not None:  # it was submitted and Slurm no longer knows it
                self._end(client, key, attempt, {"attempt": key[1], "type": "stopped",
                                                 "message": f"Slurm lost job {attempt.slurm_id}"})
            elif stop:
                self._end(client, key, attempt, {"attempt": key[1], "type": "stopped",
                                                 "message": "stopped before Slurm started it"})
            else:
                self._submit(node, client, assignment, key, attempt, gres_types)
            return
        attempt.slurm_id = job.slurm_id
        if job.state != "PENDING" and not attempt.started:
            client.job_event(key[0], {"attempt": key[1], "type": "started",
                                      "message": f"Slurm job {job.slurm_id} on {job.node}"})
            attempt.started = True
        if job.active:
            self._ship(client, key, attempt, final=False)
            if stop:
                self._stop(job, attempt, float(assignment.get("grace_period_s") or 0))
            return
        self._ship(client, key, attempt, final=True)
        event = end_event(job, attempt=key[1], stop_asked=stop)
        self._end(client, key, attempt, container_end(event) if self.containers else event)

    def _submit(self, node: str, client: PortalClient, assignment: dict, key: Key, attempt: Attempt,
                gres_types: dict[str, str]) -> None:
        try:
            argv = sbatch_argv(assignment, node=node, gres_types=gres_types, output=str(self.output(key)),
                               partition=self.partition, as_team=self.as_team and not self.containers)
            if self.containers:  # root's batch job; its container runs as the team's uid
                argv.append("--chdir=/tmp")
                script = self.containers.script(assignment, key, *run_as(assignment))
                self._own_output(key, 0, 0)  # root's, 0600: no other user on the node reads it
            else:
                script = batch_script(assignment)
                if self.as_team:
                    self._own_output(key, *run_as(assignment))
        except LaunchError as error:
            self._end(client, key, attempt, {"attempt": key[1], "type": "start_failed", "message": str(error)})
            return
        try:
            attempt.slurm_id = int(self.slurm.run(*argv, stdin=script).strip().split(";")[0])
        except (SlurmError, ValueError) as error:
            log.warning("sbatch of job %s attempt %s failed (retried next poll): %s", key[0], key[1], error)
            return
        log.info("job %s attempt %s is Slurm job %s on %s", key[0], key[1], attempt.slurm_id, node)

    def _own_output(self, key: Key, uid: int, gid: int) -> None:
        """The job's output file, made before the job by the bridge and given to the team's uid (mode 0600), as
        Slurm opens it as the job's user: the output directory stays the bridge's, and one team cannot read
        another's output."""
        try:
            pwd.getpwuid(uid)
        except KeyError:
            raise LaunchError(f"uid {uid} of the job's team is not a user on the bridge host: Slurm runs a job "
                              "only as a user its hosts know (add the team's user, e.g. through LDAP)") from None
        path = self.output(key)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            try:
                os.fchown(fd, uid, gid)
                os.fchmod(fd, 0o600)
            finally:
                os.close(fd)
        except OSError as error:
            raise LaunchError(f"cannot give the output file {path} to uid {uid}: {error}") from None

    def _stop(self, job: SlurmJob, attempt: Attempt, grace_s: float) -> None:
        """The grace signal first (SIGTERM to every step, the batch shell included), the kill once the grace
        period has passed, and again each grace period (at least ``RESEND_S``) while the job lives: Slurm
        22.05 can drop a signal that reaches a job still being launched. A job not started is cancelled."""
        now = self.clock()
        try:
            if job.state == "PENDING":
                self._cancel(job, "stopped by Rota before it started")
            elif attempt.term_sent_at is None:
                self.slurm.run("scancel", "--signal=TERM", "--full", str(job.slurm_id))
                attempt.term_sent_at = now
            elif now - (attempt.killed_at or attempt.term_sent_at) >= max(grace_s, RESEND_S if attempt.killed_at
                                                                          else 0):
                self.slurm.run("scancel", "--signal=KILL", "--full", str(job.slurm_id))
                attempt.killed_at = now
        except SlurmError as error:
            log.warning("scancel of Slurm job %s failed (retried next poll): %s", job.slurm_id, error)

    def _cancel(self, job: SlurmJob, why: str) -> None:
        try:
            self.slurm.run("scancel", str(job.slurm_id))
            log.info("cancelled Slurm job %s (Rota job %s): %s", job.slurm_id, job.key[0], why)
        except SlurmError as error:
            log.warning("scancel of Slurm job %s failed: %s", job.slurm_id, error)

    def _ship(self, client: PortalClient, key: Key, attempt: Attempt, *, final: bool) -> None:
        if attempt.log_done:
            return

        def progress(offset: int) -> None:
            attempt.log_offset = offset

        try:
            ship_log(client, key[0], key[1], str(self.output(key)), attempt.log_offset, final=final,
                     progress=progress)
        except PortalRejected:
            attempt.log_done = True  # the attempt is over for the portal: the rest is not wanted

    def _end(self, client: PortalClient, key: Key, attempt: Attempt, event: dict) -> None:
        client.job_event(key[0], event)
        attempt.ended = True
        if self.containers:
            self.containers.clean(key)
        log.info("job %s attempt %s: %s (%s)", key[0], key[1], event["type"], event.get("message", ""))
