"""The simulator's input: a workload trace as plain, engine-independent records.

Times are float seconds on the trace clock: 0 is the trace's origin (the start of the time window when
one is given, else the earliest submit). GPU counts are whole GPUs; a fractional request sets
``gpu_fraction`` (0 < f < 1) with ``gpus`` = 1, as ``scheduler.core.types.JobInfo`` expects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


class TraceError(ValueError):
    """A trace or cluster file that cannot be read. The message names the file, line and column."""


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace: when it arrives, how long it runs once started, and what it asks for.

    duration: seconds of useful run time (restarts after a preemption add the simulator's restart cost).
    time_limit_s: the job is stopped (timed out) when one attempt runs this long; None means no limit.
    """

    id: int
    submit_time: float
    duration: float
    gpus: int
    team: str = "default"
    user: str = ""
    gpu_models: tuple[str, ...] = ()
    kind: str = "training"
    priority_class: str = "training"
    time_limit_s: float | None = None
    gpu_fraction: float | None = None
    cpus: int = 0
    memory_mb: int = 0
    name: str = ""

    @property
    def gpu_request(self) -> float:
        """GPUs this job holds while it runs (a fraction for a shared-GPU job)."""
        return self.gpu_fraction if self.gpu_fraction is not None else float(self.gpus)


@dataclass(frozen=True, slots=True)
class TraceNode:
    """A node described by the trace itself (the openb node list): name, GPUs, model, CPUs, memory."""

    name: str
    gpus: int
    model: str
    cpus: int = 0
    memory_mb: int = 0


@dataclass(frozen=True, slots=True)
class Trace:
    """A loaded trace: jobs sorted by (submit_time, id), plus where they came from.

    origin: the wall-clock instant of time 0 when the trace has dates (Philly), else None.
    nodes: the cluster the trace ran on, when the trace says (openb); empty otherwise.
    skipped: rows read but not replayed, by cause (e.g. {"cpu-only": 1088}).
    end: the end of the time window on the trace clock, when one was given.
    """

    jobs: tuple[TraceJob, ...]
    source: str = ""
    format: str = ""
    origin: datetime | None = None
    nodes: tuple[TraceNode, ...] = ()
    skipped: dict[str, int] = field(default_factory=dict)
    end: float | None = None

    @property
    def span_s(self) -> float:
        """The measurement window in seconds: time 0 to the window end, else to the last submit."""
        if self.end is not None:
            return max(1.0, self.end)
        return max(1.0, max((job.submit_time for job in self.jobs), default=0.0))

    @property
    def teams(self) -> tuple[str, ...]:
        """Team names in order of first appearance."""
        return tuple(dict.fromkeys(job.team for job in self.jobs))

    @property
    def gpu_seconds(self) -> float:
        """Offered load: the sum of duration x GPUs over all jobs."""
        return sum(job.duration * job.gpu_request for job in self.jobs)

    def gpu_seconds_by_team(self) -> dict[str, float]:
        """Offered GPU-seconds per team (the basis of derived quotas)."""
        totals: dict[str, float] = {}
        for job in self.jobs:
            totals[job.team] = totals.get(job.team, 0.0) + job.duration * job.gpu_request
        return totals
