"""The engine's plain data: what a scheduling cycle reads (a Snapshot) and what it decides (Decisions).

No Django, no clock, no I/O. Times are float seconds on one clock chosen by the caller (the live cycle
uses Unix epoch seconds from the database; the simulator uses trace seconds); the engine never reads a
clock, it only uses ``Snapshot.now``. GPU counts are floats because a job may hold a fraction of a
device (``share``); memory is in MiB.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

# Job states as the engine sees them. The live system has more (admitted, starting, ...); the snapshot
# builder maps every state that holds resources to RUNNING and every waiting one to PENDING or HELD.
PENDING = "pending"
RUNNING = "running"
HELD = "held"

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _empty_mapping() -> Mapping[str, Any]:
    """The shared read-only empty mapping (a factory: dataclasses refuse unhashable plain defaults)."""
    return _EMPTY


@dataclass(frozen=True, slots=True)
class GpuDevice:
    """One schedulable accelerator (a whole GPU or one MIG slice, which has its own model name)."""

    id: int  # stable identity (database primary key in the live system)
    node: str  # name of the node it sits on
    index: int  # device index on its node
    model: str  # GPU model name, e.g. "h100-80gb" or "a100-1g.10gb"
    memory_mb: int
    healthy: bool = True
    mig: bool = False  # a MIG slice: only jobs that name its model get it (never "any model")


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A host with GPUs. ``schedulable`` is False unless the node is ready (not draining/down/unhealthy)."""

    name: str
    pool: str
    gpus: tuple[GpuDevice, ...]
    cpus: int = 0  # 0 means "not tracked": CPU requests are not checked on this node
    memory_mb: int = 0  # 0 means "not tracked"
    schedulable: bool = True
    # e.g. {"network": "ib", "storage": "nvme"}
    labels: Mapping[str, str] = field(default_factory=_empty_mapping)
    driver_version: str = ""  # e.g. "550.54.15"
    cuda_version: str = ""  # e.g. "12.4"


@dataclass(frozen=True, slots=True)
class TeamInfo:
    """A tenant. ``parent`` forms the department -> team tree; ``pools`` are the pools it may use:
    None means every pool (simulations, literal tests); an empty set means none (tenancy fails closed)."""

    name: str
    parent: str | None = None
    pools: frozenset[str] | None = None


@dataclass(frozen=True, slots=True)
class QuotaInfo:
    """Quota of one team for one GPU model (optionally one pool), in GPUs (fractions allowed).

    guaranteed: always available to the team; lent to others while idle, reclaimed by preemption.
    limit: the most the team may hold of this model, borrowing included (None: no limit beyond capacity).
    weight: the team's share of idle capacity among borrowers.
    non_lendable: the part of ``guaranteed`` that is never lent to other teams.
    A team with no quota row for a model may not use that model (limit 0).
    """

    team: str
    gpu_model: str
    guaranteed: float = 0.0
    limit: float | None = None
    weight: float = 1.0
    non_lendable: float = 0.0
    pool: str | None = None


@dataclass(frozen=True, slots=True)
class LoanInfo:
    """A quota loan: ``lender`` lends ``gpus`` of its guarantee of ``gpu_model`` (all pools) to ``borrower``
    for ``[starts_at, ends_at)``. While it runs, the guarantee is the borrower's (and its limit grows by as
    much); before and after, the lender's. See ``scheduler.core.loans``."""

    lender: str
    borrower: str
    gpu_model: str
    gpus: float
    starts_at: float
    ends_at: float


@dataclass(frozen=True, slots=True)
class PriorityClassInfo:
    """A priority class: higher ``value`` runs first. Times in seconds."""

    name: str
    value: int
    preemptible: bool = True  # default for jobs of this class
    may_preempt: bool = True  # jobs of this class may preempt lower-priority work
    min_runtime_s: float = 0.0  # a job of this class runs at least this long before it may be preempted
    grace_period_s: float = 30.0  # SIGTERM -> SIGKILL delay when a job of this class is stopped


@dataclass(frozen=True, slots=True)
class Placement:
    """One slice of an allocation: a device and the share of it held (1.0 = the whole device)."""

    gpu_id: int
    share: float = 1.0


@dataclass(frozen=True, slots=True)
class JobInfo:
    """A job as the engine sees it: its request and, when running, what it holds.

    gpus: whole GPUs requested in total (across all nodes of a gang). When ``gpu_fraction`` is set the
      job wants ``gpu_fraction`` (0 < f < 1) of one device, memory share included, and ``gpus`` is 1.
    gpu_models: acceptable models; empty means any model the team has quota for.
    nodes: None lets the engine choose (one node when it fits, else the fewest nodes); an int N asks for
      exactly N nodes with gpus/N GPUs on each (a multi-node gang).
    cpus, memory_mb: totals for the job, split evenly over its nodes.
    """

    id: int
    team: str
    user: str = ""
    kind: str = "training"
    priority_class: str = "training"
    priority: int = 0
    preemptible: bool = True
    gpus: int = 1
    gpu_fraction: float | None = None
    gpu_models: tuple[str, ...] = ()
    gpu_memory_mb: int = 0
    cpus: int = 0
    memory_mb: int = 0
    nodes: int | None = None
    pool: str | None = None
    node_labels: Mapping[str, str] = field(default_factory=_empty_mapping)
    min_driver_version: str = ""
    submitted_at: float = 0.0
    time_limit_s: float | None = None
    state: str = PENDING
    # Running jobs only:
    started_at: float | None = None
    placements: tuple[Placement, ...] = ()
    terminating: bool = False  # being stopped (preempted/cancelled): still holds its devices
    last_checkpoint_at: float | None = None
    # Service already received, in GPU-seconds (for least-attained-service ordering):
    attained_gpu_s: float = 0.0
    # False: the job may not preempt others whatever its class (a service restarting in a crash loop waits
    # for free GPUs instead of evicting work on each restart).
    may_preempt: bool = True
    # The container image the job runs in (for messages) and the pools whose allow-list admits it; None: no
    # image rule applies (the simulator, literal tests). The rule itself is scheduler.images', outside the core.
    image: str = ""
    image_pools: frozenset[str] | None = None


@dataclass(frozen=True, slots=True)
class Policy:
    """Knobs that select and tune the policy. Admins change these through data, not code."""

    name: str = "rota"
    ordering: str = "fairshare"  # "fifo" | "fairshare" | "las"
    backfill: bool = True
    preemption: bool = True
    borrowing: bool = True
    placement: str = "binpack"  # "binpack" | "spread"
    fair_share_half_life_s: float = 7 * 24 * 3600.0
    # Within each priority level, admit work that fits its team's guarantee before work that would borrow,
    # so capacity that frees up goes to its owners first instead of being lent and then reclaimed.
    guarantee_first: bool = True
    # Discretized least-attained-service (Tiresias' 2D-LAS), with ordering "las": ascending thresholds in
    # GPU-seconds split jobs into service levels (level k: attained >= k thresholds). A lower level ranks
    # above a higher one of the same priority, so fresh jobs preempt jobs that have had much service;
    # arrival order within a level. Empty: continuous LAS (sort by attained service), no level ranks.
    las_thresholds_gpu_s: tuple[float, ...] = ()
    # Who priority preemption may take from: "team" (the preemptor's own team; other teams' work only by
    # reclaim of borrowed capacity) or "cluster" (any team: single-tenant baselines such as Tiresias).
    preemption_scope: str = "team"
    # Whether a team below its guarantee takes back borrowed GPUs by preempting borrowers (needs preemption).
    reclaim: bool = True


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one cycle needs. ``usage`` is each team's decayed historical GPU-seconds."""

    now: float
    nodes: tuple[NodeInfo, ...]
    jobs: tuple[JobInfo, ...]
    teams: tuple[TeamInfo, ...] = ()
    quotas: tuple[QuotaInfo, ...] = ()
    priority_classes: tuple[PriorityClassInfo, ...] = ()
    usage: Mapping[str, float] = field(default_factory=dict)
    policy: Policy = Policy()
    # False: the caller needs the decisions and reasons only (the simulator), so waiting jobs get no
    # estimated start (None); their queue positions and reasons are the same.
    estimate_starts: bool = True
    # Quota loans; those running at ``now`` move guarantee between teams (``scheduler.core.loans``).
    loans: tuple[LoanInfo, ...] = ()
    # Seconds between cycles. Reclaim's hysteresis: a job that started within two intervals (in the last
    # cycle) is not reclaimed yet (``scheduler.core.preemption.reclaimable_at``). 0: no hysteresis.
    cycle_interval_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Reason:
    """Why a job is not running: a stable code (Slurm/Kueue words), a human message, numbers."""

    code: str
    message: str
    details: Mapping[str, object] = field(default_factory=_empty_mapping)


@dataclass(frozen=True, slots=True)
class Start:
    """Start ``job_id`` on these devices. ``borrowed`` is the GPUs held above the team's guarantee."""

    job_id: int
    placements: tuple[Placement, ...]
    borrowed: float = 0.0


@dataclass(frozen=True, slots=True)
class Preemption:
    """Stop ``job_id`` (then requeue it) to make room for ``by_job_id``.

    reason is "Priority" (higher priority in the same team / class rules) or "Reclaim" (the owner of
    borrowed guaranteed capacity takes it back). gpu_seconds_lost is the work since the last checkpoint.
    """

    job_id: int
    by_job_id: int
    reason: str
    message: str
    gpu_seconds_lost: float = 0.0
    grace_period_s: float = 30.0


class PendingInfo(NamedTuple):
    """A job that stays pending this cycle: why, where it stands, and when it may start (None: unknown).

    A named tuple rather than a frozen dataclass: a cycle makes one per waiting job (tens of thousands),
    and a tuple is built in a third of the time."""

    job_id: int
    reason: Reason
    queue_position: int | None  # None for a held job (the walk skips it)
    estimated_start: float | None = None


@dataclass(frozen=True, slots=True)
class Decisions:
    """The output of one cycle. Every pending or held job of the snapshot appears in ``pending``
    unless it is started; ``stats`` holds counters (never timings: the core reads no clock)."""

    starts: tuple[Start, ...] = ()
    preemptions: tuple[Preemption, ...] = ()
    pending: tuple[PendingInfo, ...] = ()
    stats: Mapping[str, int] = field(default_factory=_empty_mapping)
