"""Where a job may go and where it goes: static filters (pool, model, memory, labels, driver, host size)
and the search over a group's free-capacity buckets (best-fit bin packing by default, spread on request).

A ``Request`` is a job's demand in the shape placement needs: ``per_node`` devices on each of ``n_nodes``
nodes (``n_nodes=None``: one node when the job fits on one, else the fewest nodes), or ``fraction`` of one
device. Searches never look at more nodes than they must: buckets are scanned from the best-fitting size
and nodes inside a bucket are already in name order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass

from scheduler.core.cluster import EPS, Cluster, Device, Group, Node, version_tuple
from scheduler.core.types import JobInfo, Placement

# veto(node, devices_taken) -> True when taking that many devices on the node would break a reservation.
Veto = Callable[[Node, float], bool]


@dataclass(frozen=True, slots=True)
class Request:
    """A job's demand for placement. ``gpus`` is the total; ``fraction`` is set for shared devices."""

    gpus: int
    fraction: float | None
    nodes: int | None
    min_memory_mb: int
    cpus: int
    memory_mb: int
    labels: tuple[tuple[str, str], ...]
    min_driver: tuple[int, ...]

    @property
    def constrained(self) -> bool:
        """True when nodes must be checked one by one (labels, driver, host CPUs or RAM)."""
        return bool(self.labels or self.min_driver or self.cpus or self.memory_mb)

    @property
    def amount(self) -> float:
        """GPUs charged to quota: the fraction for a shared device, else the whole count."""
        return self.fraction if self.fraction is not None else float(self.gpus)


def request_of(job: JobInfo) -> Request:
    """Derive the placement request of ``job``.

    A fractional job's ``gpu_memory_mb`` is what its share must hold: on a device of M MiB a share ``f``
    holds ``f * M``, so the device needs at least ``gpu_memory_mb / f`` MiB (0.25 of an 80 GB card gives
    20 GB; of a 40 GB card only 10 GB)."""
    fraction = job.gpu_fraction if job.gpu_fraction is not None and job.gpu_fraction < 1.0 - EPS else None
    min_memory = job.gpu_memory_mb
    if fraction is not None and min_memory:
        min_memory = math.ceil(min_memory / fraction - 1e-6)
    return Request(
        gpus=1 if fraction is not None else max(job.gpus, 0),
        fraction=fraction,
        nodes=job.nodes,
        min_memory_mb=min_memory,
        cpus=job.cpus,
        memory_mb=job.memory_mb,
        labels=tuple(sorted(job.node_labels.items())),
        min_driver=version_tuple(job.min_driver_version) if job.min_driver_version else (),
    )


def part_sizes(req: Request, group: Group) -> tuple[int, ...] | None:
    """Whole devices per node the request takes in ``group``, largest first (a fraction counts as one
    device): the gang's members, the one node of a job that fits on one, or, for a job larger than any
    node, the fewest nodes (full nodes of the group's largest size, then the rest). None: it cannot split.

    Reservations and preemption plans use this shape; placement itself may find another of the same
    size (e.g. two half-free nodes) when it exists."""
    if req.fraction is not None:
        return (1,)
    if req.nodes is not None and req.nodes > 1:
        if req.gpus % req.nodes:
            return None
        return (req.gpus // req.nodes,) * req.nodes
    if req.nodes == 1 or req.gpus <= group.max_devices:
        return (req.gpus,)
    if group.max_devices <= 0:
        return None
    full, rest = divmod(req.gpus, group.max_devices)
    return (group.max_devices,) * full + ((rest,) if rest else ())


def node_matches(node: Node, req: Request, n_parts: int) -> bool:
    """Static node filter: labels, driver version and host size (CPUs/RAM per gang member)."""
    labels: Mapping[str, str] = node.info.labels
    for key, value in req.labels:
        if labels.get(key) != value:
            return False
    if req.min_driver and node.driver < req.min_driver:
        return False
    info = node.info
    if req.cpus and info.cpus and info.cpus < req.cpus / n_parts - EPS:
        return False
    return not (req.memory_mb and info.memory_mb and info.memory_mb < req.memory_mb / n_parts - EPS)


def host_has_room(node: Node, req: Request, n_parts: int) -> bool:
    """Dynamic host check: free CPUs and RAM (untracked resources always fit)."""
    if req.cpus and node.cpus_free is not None and node.cpus_free < req.cpus / n_parts - EPS:
        return False
    return not (req.memory_mb and node.mem_free is not None and node.mem_free < req.memory_mb / n_parts - EPS)


def fits_host(node: Node, req: Request, n_parts: int) -> bool:
    """Static and dynamic node checks together (always true for a request without node constraints)."""
    return not req.constrained or (node_matches(node, req, n_parts) and host_has_room(node, req, n_parts))


def free_devices(node: Node, model: str, req: Request, count: int) -> list[Device] | None:
    """The ``count`` lowest-index idle healthy devices of ``model`` with enough memory, or None."""
    out = []
    for d in node.by_model.get(model, ()):
        if d.healthy and d.free > 1.0 - EPS and d.memory_mb >= req.min_memory_mb:
            out.append(d)
            if len(out) == count:
                return out
    return None


def _candidates(group: Group, need: int, spread: bool) -> Iterator[int]:
    """Yield node orders with at least ``need`` free devices: smallest bucket first (best fit), or
    largest first (spread)."""
    top = len(group.buckets) - 1
    ks = range(top, need - 1, -1) if spread else range(need, top + 1)
    for k in ks:
        yield from group.buckets[k]


def best_node(cluster: Cluster, group: Group, req: Request, need: int, n_parts: int, spread: bool, veto: Veto | None,
              exclude: Collection[int]) -> tuple[Node, list[Device]] | None:
    """The best node of ``group`` for ``need`` devices (one member of a gang of ``n_parts``) and those
    devices, or None."""
    for order in _candidates(group, need, spread):
        if order in exclude:
            continue
        node = cluster.node_by_order[order]
        if not fits_host(node, req, n_parts):
            continue
        if veto is not None and veto(node, need):
            continue
        devs = free_devices(node, group.model, req, need)
        if devs is not None:
            return node, devs
    return None


def place_fewest(cluster: Cluster, group: Group, req: Request, veto: Veto | None) -> tuple[Placement, ...] | None:
    """A job larger than any node: fill the emptiest nodes first (fewest nodes), best-fit the rest."""
    remaining = req.gpus
    chosen: list[int] = []
    parts: list[tuple[Node, int]] = []
    while remaining > 0:
        if remaining <= group.max_free():
            found = best_node(cluster, group, req, remaining, len(parts) + 1, False, veto, chosen)
            if found is not None:
                parts.append((found[0], remaining))
                break
        taken: tuple[Node, int] | None = None
        for k in range(min(remaining, len(group.buckets) - 1), 0, -1):
            found = best_node(cluster, group, req, k, len(parts) + 2, False, veto, chosen)
            if found is not None:
                taken = (found[0], len(found[1]))
                break
        if taken is None:
            return None
        chosen.append(taken[0].order)
        parts.append(taken)
        remaining -= taken[1]
    out: list[Placement] = []
    for node, count in parts:
        devs = free_devices(node, group.model, req, count)
        if devs is None:  # pragma: no cover - guarded by the search above
            return None
        out.extend(Placement(d.id) for d in devs)
    return tuple(out)
