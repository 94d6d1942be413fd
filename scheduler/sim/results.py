"""What one replay produces: a record per job plus counters. ``metrics.summarize`` turns it into figures."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class JobRecord:
    """The fate of one job. Times in seconds on the trace clock; ``gpus`` may be a fraction.

    outcome: completed, timed-out, running (still running when the replay stopped) or pending.
    """

    id: int
    team: str
    submit: float
    duration: float
    gpus: float
    first_start: float | None
    end: float | None
    preemptions: int = 0
    lost_gpu_s: float = 0.0
    outcome: str = "completed"

    @property
    def jct(self) -> float | None:
        """Job completion time: end - submit (None when it did not finish)."""
        return None if self.end is None else self.end - self.submit

    @property
    def queue_delay(self) -> float | None:
        """First start - submit (None when it never started)."""
        return None if self.first_start is None else self.first_start - self.submit


@dataclass(slots=True)
class SimResult:
    """Raw outcome of a replay.

    allocated_gpu_s / useful_gpu_s: GPU-seconds held by jobs / spent on their trace work (not on restart
      costs, grace periods or rolled-back work), both inside the measurement window ``[0, span_s)``.
    lost_gpu_s: GPU-seconds held without progress because of preemptions (grace, restart, rollback).
    teams: per team (GPU-seconds held while jobs waited, seconds starved below its guarantee, the longest
      starved stretch in seconds).
    free_gpus_while_pending: free GPUs after the last cycle that left jobs waiting (packing traces).
    """

    policy: str
    capacity: int
    span_s: float
    offered_gpu_s: float
    jobs: list[JobRecord] = field(default_factory=list)
    cycles: int = 0
    skipped_cycles: int = 0
    engine_s: float = 0.0
    check_s: float = 0.0
    wall_s: float = 0.0
    end_s: float = 0.0
    invariant_violations: int = 0
    invariant_examples: list[str] = field(default_factory=list)
    apply_errors: int = 0
    apply_examples: list[str] = field(default_factory=list)
    quota_violations: int = 0
    quota_examples: list[str] = field(default_factory=list)
    preemptions: int = 0
    lost_gpu_s: float = 0.0
    allocated_gpu_s: float = 0.0
    useful_gpu_s: float = 0.0
    peak_allocated: float = 0.0
    free_gpus_while_pending: float | None = None
    unarrived: int = 0
    teams: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    guaranteed: dict[str, float] = field(default_factory=dict)
