"""The process executor: ``/bin/sh -c COMMAND`` on the host, as the team's uid (a laptop demo only).

It separates teams by Unix identity and private directories, but it does not isolate them: a job sees
the host's files, every GPU device and the whole machine's CPUs and memory. The image and the limits of
an assignment are not used, and its ``started`` event says so.
"""

from __future__ import annotations

from pathlib import Path

from scheduler.agent.checkpoints import CHECKPOINT_ENV, checkpoint_file
from scheduler.agent.executors.base import Executor
from scheduler.agent.executors.identity import Identity
from scheduler.agent.executors.launch import Launch
from scheduler.agent.jobs import Assignment, Limits


class ProcessExecutor(Executor):
    """Runs each attempt as a process group on the host."""

    name = "process"
    isolates = False

    def describe(self) -> dict[str, object]:
        """Says plainly what it does not protect."""
        return {
            **super().describe(),
            "detail": "jobs run on the host as their team's uid: no image, no cgroup limits, every GPU "
            "device visible; it does not isolate tenants (a laptop demo only)",
        }

    def _launch(self, assignment: Assignment, job_dir: Path, who: Identity) -> Launch:
        user = ("-", "-") if who.uid is None else (str(who.uid), str(who.gid))
        notes = []
        if assignment.image:
            notes.append(f"image {assignment.image} not used: the process executor runs on the host")
        if assignment.limits != Limits():
            limits = assignment.limits.describe()
            notes.append(f"limits ({limits}) not enforced: the process executor has no cgroups")
        env = {**self.job_env(assignment), CHECKPOINT_ENV: str(checkpoint_file(job_dir))}
        if who.uid is not None:  # the team's own home: the agent's is not the job's to read or write
            env.update(HOME=str(job_dir), USER=str(who.uid), LOGNAME=str(who.uid))
        return Launch(["/bin/sh", "-c", assignment.command], env, user, notes=tuple(notes))
