"""Small builders for literal snapshots in core tests: a node of N GPUs, a running job, a snapshot."""

from __future__ import annotations

from scheduler.core.policies import PRESETS
from scheduler.core.types import (
    RUNNING,
    GpuDevice,
    JobInfo,
    NodeInfo,
    Placement,
    PriorityClassInfo,
    QuotaInfo,
    Snapshot,
    TeamInfo,
)

MEMORY = {"h100-80gb": 81920, "a100-40gb": 40960, "l40s-48gb": 49152, "a100-1g.10gb": 10240}


def node(name: str, model: str = "h100-80gb", gpus: int = 8, pool: str = "train", first_id: int | None = None,
         **kw) -> NodeInfo:
    """A node called ``name`` with ``gpus`` devices of ``model``; device ids default to a per-name base."""
    base = first_id if first_id is not None else (abs(hash(name)) % 10_000) * 100
    unhealthy = set(kw.pop("unhealthy", ()))
    mig = kw.pop("mig", False)  # the devices are MIG slices
    devs = tuple(
        GpuDevice(id=base + i, node=name, index=i, model=model, memory_mb=MEMORY.get(model, 16384),
                  healthy=i not in unhealthy, mig=mig)
        for i in range(gpus)
    )
    return NodeInfo(name=name, pool=pool, gpus=devs, **kw)


def gpu_ids(n: NodeInfo, count: int, start: int = 0) -> tuple[int, ...]:
    """Ids of ``count`` devices of node ``n`` from index ``start``."""
    return tuple(g.id for g in n.gpus[start:start + count])


def running(job_id: int, team: str, devices: tuple[int, ...], share: float = 1.0, **kw) -> JobInfo:
    """A running job holding ``devices`` (each at ``share``)."""
    kw.setdefault("gpus", len(devices))
    kw.setdefault("started_at", 0.0)
    return JobInfo(id=job_id, team=team, state=RUNNING, placements=tuple(Placement(d, share) for d in devices), **kw)


def quota(team: str, model: str = "h100-80gb", guaranteed: float = 0.0, limit: float | None = None, **kw) -> QuotaInfo:
    """A quota row."""
    return QuotaInfo(team=team, gpu_model=model, guaranteed=guaranteed, limit=limit, **kw)


CLASSES = (
    PriorityClassInfo("production-inference", 1000, preemptible=False, min_runtime_s=0, grace_period_s=60),
    PriorityClassInfo("interactive", 800, min_runtime_s=0, grace_period_s=30),
    PriorityClassInfo("training", 500, min_runtime_s=600, grace_period_s=120),
    PriorityClassInfo("batch", 300, min_runtime_s=0, grace_period_s=30),
    PriorityClassInfo("best-effort", 100, min_runtime_s=0, grace_period_s=10),
)


def snap(nodes, jobs, quotas=(), teams=(), policy="rota", now=1000.0, usage=None, classes=CLASSES) -> Snapshot:
    """A snapshot with the standard priority classes and the named policy preset."""
    pol = PRESETS[policy] if isinstance(policy, str) else policy
    return Snapshot(now=now, nodes=tuple(nodes), jobs=tuple(jobs), quotas=tuple(quotas),
                    teams=tuple(teams), priority_classes=tuple(classes), usage=usage or {}, policy=pol)


def team(name: str, parent: str | None = None, pools=None) -> TeamInfo:
    """A team row (``pools`` None: every pool)."""
    return TeamInfo(name=name, parent=parent, pools=None if pools is None else frozenset(pools))


def by_id(decisions):
    """(started job ids, {pending job id: PendingInfo}) of some decisions."""
    return {s.job_id for s in decisions.starts}, {p.job_id: p for p in decisions.pending}
