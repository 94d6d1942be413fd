"""Gang plugin: a multi-node job starts whole or not at all.

A job asking for ``nodes`` > 1 needs ``gpus / nodes`` free devices on each of exactly that many distinct
nodes of one group (pool × GPU model), best fit per member; none of it starts otherwise. On nodes with
topology labels it goes inside one switch or NVLink domain whenever one could ever hold it
(``scheduler.core.topology``). While it waits, its reason says how many nodes are ready
(``GangIncomplete``), or, when enough are ready but in no single block, the largest block (``Topology``).
"""

from __future__ import annotations

from scheduler.core import reasons as R
from scheduler.core import topology
from scheduler.core.cluster import Cluster, Group
from scheduler.core.feasibility import shape_text
from scheduler.core.placement import Request, Veto, best_node
from scheduler.core.types import Placement

NAME = "gang"


def is_gang(req: Request) -> bool:
    """Whether ``req`` is a multi-node gang."""
    return req.nodes is not None and req.nodes > 1


def bound_to_block(group: Group, req: Request) -> bool:
    """Whether ``req`` is a gang that must land inside one topology block of ``group`` (one could hold it)."""
    n = req.nodes
    return (n is not None and n > 1 and req.gpus % n == 0 and topology.labelled(group)
            and topology.could_ever_hold(group, req, req.gpus // n, n))


def place(cluster: Cluster, group: Group, req: Request, per: int, n: int,
                veto: Veto | None) -> tuple[Placement, ...] | None:
    """Exactly ``n`` distinct nodes with ``per`` devices each (best fit), inside one topology block when one
    could ever hold the gang; or None."""
    if topology.labelled(group):
        inside = topology.place_inside(group, req, per, n, veto)
        if inside is not None:
            return tuple(Placement(d.id) for _node, devs in inside for d in devs)
        if topology.could_ever_hold(group, req, per, n):
            return None  # it waits for a block rather than span (``waiting`` says so)
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
    if ready >= req.nodes and topology.labelled(group) and topology.could_ever_hold(group, req, per, req.nodes):
        label, block, most = topology.largest_free_block(group, per)
        where = f"{topology.word(label)} {block}" if block else "any switch"
        return R.reason(
            R.TOPOLOGY,
            f"gang of {shape_text(req)} of {group.model} waits to fit inside one switch or NVLink domain: the "
            f"largest free block has {most} of {req.nodes} nodes with {per} free GPUs ({where}); {ready} such "
            f"nodes are free across pool {group.pool}",
            gpu_model=group.model, pool=group.pool, nodes=req.nodes, largest_free_block_nodes=most,
            block=block, block_label=label, nodes_ready=ready, plugin=NAME)
    return R.reason(
        R.GANG_INCOMPLETE,
        f"gang of {shape_text(req)} of {group.model}: only {ready} of {req.nodes} nodes have "
        f"{per} free GPUs in pool {group.pool}",
        gpu_model=group.model, pool=group.pool, nodes_ready=ready, nodes=req.nodes, plugin=NAME)
