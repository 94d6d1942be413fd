"""Watching each running job's checkpoint file, reported as ``checkpoint`` job events (docs/node-protocol.md).

A job says it has saved its work by touching (or writing) the file named by ``$ROTA_CHECKPOINT_FILE``: its
job directory's ``rota-checkpoint`` (``/job/rota-checkpoint`` inside a container, the same file on the
host). Before it launches an attempt the agent notes the file's modification time (none when there is no
file); each pass it looks again, and a time later than that and than the last one it reported becomes an
event, which the portal records as the job's last checkpoint (a later preemption loses only the work after
it). The file's content is the job's own (for instance the path of the checkpoint it wrote); the agent never
reads it, and never follows a link there (``lstat``).
"""

from __future__ import annotations

import datetime as dt
import os
import stat
from collections.abc import Callable
from pathlib import Path

from scheduler.agent.jobs import JobEvent, JobRecord, job_key
from scheduler.agent.wire import iso

CHECKPOINT_FILE = "rota-checkpoint"
CHECKPOINT_ENV = "ROTA_CHECKPOINT_FILE"


def checkpoint_file(job_dir: Path) -> Path:
    """Where the job of ``job_dir`` (its directory on the host) touches its checkpoint file."""
    return job_dir / CHECKPOINT_FILE


def modified_at(path: Path) -> float | None:
    """The modification time (Unix time) of the regular file at ``path``, never following a link; or None."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return info.st_mtime if stat.S_ISREG(info.st_mode) else None


def changed_at(job: JobRecord, path: Path) -> float | None:
    """The file's modification time when it is a regular file changed during this attempt and after the last
    reported change; else None.

    "During this attempt" is against the file as it was just before the launch, not against the agent's
    clock: the kernel stamps files from a coarse clock that can lag it by a tick, so a job that saves at
    once could leave a time earlier than a start the agent read a moment before."""
    moment = modified_at(path)
    if moment is None:
        return None
    seen = job.checkpoint_at if job.checkpoint_at is not None else job.checkpoint_before
    return None if seen is not None and moment <= seen else moment


def checkpoint_events(jobs: list[JobRecord], work_dir: Path) -> list[JobEvent]:
    """A ``checkpoint`` event for each running (or stopping: a job saves its work in its grace period) attempt
    whose file changed since the last pass; the records remember what was reported (the caller saves them)."""
    events = []
    for job in jobs:
        moment = changed_at(job, checkpoint_file(work_dir / "jobs" / str(job.job_id)))
        if moment is None:
            continue
        job.checkpoint_at = moment
        when = dt.datetime.fromtimestamp(moment, dt.UTC)
        events.append(JobEvent(job.job_id, job.attempt, "checkpoint", iso(when)))
    return events


def checkpoints_then_ends(jobs: dict[str, JobRecord], work_dir: Path,
                          poll: Callable[[], list[JobEvent]]) -> list[JobEvent]:
    """One supervision pass: the checkpoints of the running attempts, then ``poll``'s end events, each
    attempt's end after its checkpoints. An attempt that ended in this pass is looked at once more after its
    processes were gone: a job that saves in its grace period and exits at once may write the file after the
    first look."""
    records = list(jobs.values())
    events = checkpoint_events(records, work_dir)
    ended = poll()
    gone = {job_key(e.job_id, e.attempt) for e in ended}
    return [*events, *checkpoint_events([r for r in records if r.key in gone], work_dir), *ended]
