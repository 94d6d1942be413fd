"""A job's mutable replay state and the ``JobInfo`` views of it that the engine sees."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from scheduler.core.types import PENDING, RUNNING, JobInfo, Placement, PriorityClassInfo
from scheduler.sim.trace import TraceJob


class SimJob:
    """Replay state of one trace job. Times in seconds on the trace clock.

    remaining: trace work still to do; overhead: restart cost owed at the next start (0 on the first);
    attained: GPU-seconds held in finished attempts; attempt: bumped on every start and preemption so
    that stale timed events are ignored; info: the engine's current view (pending or running);
    waiting: a cycle has left it in the queue (it counts in per-team contention and starvation).
    """

    __slots__ = (
        "attained",
        "attempt",
        "end",
        "first_start",
        "info",
        "lost_gpu_s",
        "models",
        "outcome",
        "overhead",
        "placements",
        "preempted_at",
        "preemptions",
        "remaining",
        "request",
        "started_at",
        "trace",
        "waiting",
    )

    def __init__(self, job: TraceJob) -> None:
        self.trace = job
        self.request = job.gpu_request
        self.remaining = job.duration
        self.overhead = 0.0
        self.attained = 0.0
        self.attempt = 0
        self.started_at = 0.0
        self.first_start: float | None = None
        self.end: float | None = None
        self.preempted_at: float | None = None
        self.preemptions = 0
        self.lost_gpu_s = 0.0
        self.placements: tuple[Placement, ...] = ()
        self.models: dict[str, float] = {}
        self.outcome = ""
        self.info: JobInfo | None = None
        self.waiting = False

    def attained_at(self, now: float) -> float:
        """GPU-seconds received: finished attempts, plus the running one up to ``now``."""
        return self.attained + (now - self.started_at) * self.request


class JobViews:
    """Builds the ``JobInfo`` the engine sees: priority and preemptibility come from the job's priority
    class; with ``exact_time_limits`` the time limit is the job's true remaining run time (an oracle
    runtime estimate for backfill), else the trace's own limit."""

    def __init__(self, classes: Mapping[str, PriorityClassInfo], exact_time_limits: bool) -> None:
        self.classes = classes
        self.exact = exact_time_limits

    def priority(self, job: SimJob) -> int:
        """The job's priority: its class's value (0 for an unknown class)."""
        cls = self.classes.get(job.trace.priority_class)
        return cls.value if cls else 0

    def preemptible(self, job: SimJob) -> bool:
        """Whether the job may be preempted (its class's default; unknown classes are preemptible)."""
        cls = self.classes.get(job.trace.priority_class)
        return cls.preemptible if cls else True

    def may_preempt(self, job: SimJob) -> bool:
        """Whether the job's class may preempt lower-priority work."""
        cls = self.classes.get(job.trace.priority_class)
        return cls.may_preempt if cls else True

    def time_limit(self, job: SimJob) -> float | None:
        """Seconds one attempt may run (None: no limit)."""
        if self.exact:
            return job.overhead + job.remaining
        return job.trace.time_limit_s

    def pending(self, job: SimJob) -> JobInfo:
        """The job waiting in the queue."""
        t = job.trace
        cls = self.classes.get(t.priority_class)
        return JobInfo(
            id=t.id,
            team=t.team,
            user=t.user,
            kind=t.kind,
            priority_class=t.priority_class,
            priority=cls.value if cls else 0,
            preemptible=cls.preemptible if cls else True,
            gpus=t.gpus,
            gpu_fraction=t.gpu_fraction,
            gpu_models=t.gpu_models,
            cpus=t.cpus,
            memory_mb=t.memory_mb,
            submitted_at=t.submit_time,
            time_limit_s=self.time_limit(job),
            state=PENDING,
            attained_gpu_s=job.attained,
        )

    def running(self, job: SimJob, now: float) -> JobInfo:
        """The job holding its devices (terminating once preempted); attained service counts the current
        attempt up to ``now``."""
        return replace(
            self.pending(job), state=RUNNING, started_at=job.started_at, placements=job.placements,
            terminating=job.preempted_at is not None, attained_gpu_s=job.attained_at(now),
        )
