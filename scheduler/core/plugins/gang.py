"""Gang plugin: a multi-node job starts whole or not at all.

A job asking for ``nodes`` > 1 needs ``gpus / nodes`` free devices on each of exactly that many distinct
nodes of one group (pool × GPU model), best fit per member; none of it starts otherwise. While it waits,
its reason says how many nodes are ready (``GangIncomplete``).
"""

from __future__ import annotations

from scheduler.core import reasons as R
from scheduler.core.cluster import Cluster, Group
from scheduler.core.feasibility import shape_text
from scheduler.core.placement import Request, Veto, best_node
from scheduler.core.types import Placement

NAME = "gang"


def is_gang(req: Request) -> bool:
    """Whether ``req`` is a multi-node gang."""
    return req.nodes is not None and req.nodes > 1


def place(cluster: Cluster, group: Group, req: Request, per: int, n: int,
                veto: Veto | None) -> tuple[Placement, ...] | None:
    """Exactly ``n`` distinct nodes with ``per`` devices each (best fit), or None."""
    chosen: list[int] = []
    out: list[Placement] = []
    for _ in range(n):
        found = best_node(cluster, group, req, per, n, False, veto, exclude=chosen)
        if found is None:
            return None
        chosen.append(found[0].order)
        out.extend(Placement(d.id) for d in found[1])
    return tuple(out)


def waiting(req: Request, group: Group) -> R.Reason | None:
    """Why a gang that fits nowhere waits, when some but not all of its nodes are ready; else None."""
    if not req.nodes or req.nodes <= 1:
        return None
    per = req.gpus // req.nodes
    ready = sum(len(b) for k, b in enumerate(group.buckets) if k >= per)
    if not ready:
        return None
    return R.reason(
        R.GANG_INCOMPLETE,
        f"gang of {shape_text(req)} of {group.model}: only {ready} of {req.nodes} nodes have "
        f"{per} free GPUs in pool {group.pool}",
        gpu_model=group.model, pool=group.pool, nodes_ready=ready, nodes=req.nodes, plugin=NAME)
