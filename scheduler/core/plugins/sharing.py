"""GPU-sharing plugin: a job asking for a fraction of one device shares it with others.

A share goes to the partly used device with the least room that still fits it (packing shares keeps whole
devices free), else to an idle device on the best-fitting node. While it waits, its reason gives the
largest free share of a device in the group.
"""

from __future__ import annotations

from scheduler.core import reasons as R
from scheduler.core.cluster import EPS, Cluster, Group
from scheduler.core.feasibility import shape_text
from scheduler.core.placement import Request, Veto, best_node, fits_host
from scheduler.core.types import Placement

NAME = "sharing"


def place(cluster: Cluster, group: Group, req: Request, veto: Veto | None) -> tuple[Placement, ...] | None:
    """A share of one device: the partly used device with the least room that still fits, else an
    idle device on the best-fitting node."""
    f = req.fraction
    if f is None:
        raise ValueError("a whole-device request has no fraction to place")
    partial = group.partial
    lo, hi = 0, len(partial)
    while lo < hi:
        mid = (lo + hi) // 2
        if partial[mid][0] < f - EPS:
            lo = mid + 1
        else:
            hi = mid
    for i in range(lo, len(partial)):
        dev = cluster.devices[partial[i][1]]
        node = dev.node
        if dev.memory_mb < req.min_memory_mb or not dev.healthy:
            continue
        if not fits_host(node, req, 1):
            continue
        if veto is not None and veto(node, 0.0):
            continue
        return (Placement(dev.id, f),)
    found = best_node(cluster, group, req, 1, 1, False, veto, exclude=())
    if found is None:
        return None
    return (Placement(found[1][0].id, f),)


def waiting(req: Request, group: Group) -> R.Reason:
    """Why a share that fits nowhere waits: the largest free share of one device in the group."""
    largest = 1.0 if group.max_free() else max((free for free, _gpu in group.partial), default=0.0)
    return R.reason(
        R.RESOURCES,
        f"needs {shape_text(req)} of {group.model} in pool {group.pool}; the largest free share of a "
        f"device is {R.fmt_gpus(largest)}",
        gpu_model=group.model, pool=group.pool, requested=R.num(req.amount),
        largest_free_share=R.num(largest), plugin=NAME)
