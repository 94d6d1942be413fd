"""Placement plugin: which devices a job gets, and why it waits when none fit.

Best fit by default (the node whose free devices fit the job most tightly, so large holes stay whole), or
spread (the emptiest node first) when the policy or the job's kind asks for it (``plugins.kinds``). A job
that fits on one node gets one node; a job larger than any node gets the fewest nodes; a gang and a share
of a device are placed by their plugins (``plugins.gang``, ``plugins.sharing``). Searches never touch the
working copy: the statement takes the devices.
"""

from __future__ import annotations

from scheduler.core import reasons as R
from scheduler.core.cluster import Cluster, Group
from scheduler.core.feasibility import shape_text
from scheduler.core.placement import Request, Veto, best_node, place_fewest
from scheduler.core.plugins import gang, sharing
from scheduler.core.types import Placement

NAME = "placement"


def place(
    cluster: Cluster, group: Group, req: Request, spread: bool, veto: Veto | None = None
) -> tuple[Placement, ...] | None:
    """Find devices for ``req`` in ``group`` without touching the working copy; None when it can't fit."""
    if req.fraction is not None:
        return sharing.place(cluster, group, req, veto)
    if req.nodes is not None and req.nodes > 1:
        if req.gpus % req.nodes:
            return None
        return gang.place(cluster, group, req, req.gpus // req.nodes, req.nodes, veto)
    if req.nodes == 1 or req.gpus <= group.max_devices:
        found = best_node(cluster, group, req, req.gpus, 1, spread, veto, exclude=())
        if found is None:
            return None
        return tuple(Placement(d.id) for d in found[1])
    return place_fewest(cluster, group, req, veto)


def waiting(req: Request, group: Group) -> R.Reason:
    """Why a job that fits nowhere in ``group`` waits: an incomplete gang, too small a free share, or not
    enough free devices on one node (with the freest node's and the pool's numbers)."""
    reason = gang.waiting(req, group)
    if reason is not None:
        return reason
    if req.fraction is not None:
        return sharing.waiting(req, group)
    most = group.max_free()
    total = group.total_free()
    return R.reason(
        R.RESOURCES,
        f"needs {shape_text(req)} of {group.model} in pool {group.pool}; "
        f"the freest node has {most} free ({total} free in the pool)",
        gpu_model=group.model, pool=group.pool, requested=R.num(req.amount), most_free_on_a_node=most,
        free_in_pool=total, plugin=NAME)
