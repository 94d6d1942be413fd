"""Named policy presets: the same engine configured four ways (the simulator compares them)."""

from collections.abc import Mapping
from types import MappingProxyType

from scheduler.core.types import Policy, PriorityClassInfo

# The priority ladder Rota ships (DESIGN.md): production inference > interactive > training > batch >
# best-effort. The demo seeds it into the database and the simulator replays traces with it.
DEFAULT_PRIORITY_CLASSES: tuple[PriorityClassInfo, ...] = (
    PriorityClassInfo("production-inference", 1000, preemptible=False, min_runtime_s=0, grace_period_s=30),
    PriorityClassInfo("interactive", 800, preemptible=False, min_runtime_s=0, grace_period_s=30),
    PriorityClassInfo("training", 500, min_runtime_s=300, grace_period_s=60),
    PriorityClassInfo("batch", 300, may_preempt=False, min_runtime_s=60, grace_period_s=30),
    PriorityClassInfo("best-effort", 100, may_preempt=False, min_runtime_s=0, grace_period_s=10),
)

PRESETS: Mapping[str, Policy] = MappingProxyType({
    # First come, first served: strict arrival order, no backfill, no preemption.
    "fifo": Policy(name="fifo", ordering="fifo", backfill=False, preemption=False,
                   guarantee_first=False),
    # Slurm-like: priority then arrival, EASY backfill, no fair share, no preemption.
    "slurm": Policy(name="slurm", ordering="fifo", backfill=True, preemption=False,
                    guarantee_first=False),
    # Tiresias-like discretized 2D-LAS: jobs rank by service level (GPU-hours received: under 1, 1-10,
    # 10 and more), arrival order within a level; a fresh job preempts jobs of a higher level, whatever
    # their team (the priority class's minimum runtime still applies); no reclaim of borrowed quota.
    "tiresias": Policy(name="tiresias", ordering="las", backfill=True, preemption=True, guarantee_first=False,
                       las_thresholds_gpu_s=(3600.0, 36000.0), preemption_scope="cluster", reclaim=False),
    # Rota's default: fair share within priority, borrowing with reclaim, preemption, backfill.
    "rota": Policy(name="rota"),
})


def policy_by_name(name: str) -> Policy:
    """Return the preset called ``name``; raise ValueError naming the allowed values otherwise."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; allowed: {', '.join(sorted(PRESETS))}") from None
