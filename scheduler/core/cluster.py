"""The cycle's working copy of the cluster: devices with their free share, indexed for fast placement.

Nodes carrying a GPU model in a pool form a ``Group``; each group keeps its schedulable nodes in buckets
by how many whole devices of the model are free (so best-fit is "the first node of the smallest bucket
that is large enough") and its partly used devices sorted by free share (for fractional jobs). Resources
only ever shrink during a cycle: preemption victims keep their devices until their node confirms the
processes are gone, so nothing is freed mid-cycle.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from typing import TYPE_CHECKING

from scheduler.core.types import JobInfo, NodeInfo, Placement, Snapshot

if TYPE_CHECKING:
    from scheduler.core.preemption import Running

EPS = 1e-9


class Device:
    """One device's live state: ``free`` is the unheld share (1.0 = idle)."""

    __slots__ = ("free", "healthy", "id", "index", "memory_mb", "mig", "model", "node")

    def __init__(self, id: int, node: Node, index: int, model: str, memory_mb: int, healthy: bool,
                 mig: bool = False):
        self.id = id
        self.node = node
        self.index = index
        self.model = model
        self.memory_mb = memory_mb
        self.healthy = healthy
        self.mig = mig
        self.free = 1.0


class Node:
    """A node's live state. ``order`` is its rank by name (ties in placement break on it)."""

    __slots__ = ("by_model", "cpus_free", "driver", "info", "mem_free", "name", "order", "pool", "schedulable")

    def __init__(self, info: NodeInfo, order: int):
        self.info = info
        self.name = info.name
        self.order = order
        self.pool = info.pool
        self.schedulable = info.schedulable
        self.driver = version_tuple(info.driver_version)
        self.cpus_free = float(info.cpus) if info.cpus else None  # None: not tracked
        self.mem_free = float(info.memory_mb) if info.memory_mb else None
        self.by_model: dict[str, list[Device]] = {}

    def whole_free(self, model: str) -> int:
        """Healthy devices of ``model`` with nothing on them."""
        return sum(1 for d in self.by_model.get(model, ()) if d.healthy and d.free > 1.0 - EPS)


class Group:
    """Schedulable nodes of one pool that carry one GPU model, indexed by free whole devices."""

    __slots__ = ("all_counts", "blocks", "buckets", "capacity", "count", "device_ids", "healthy_counts",
                 "max_devices", "min_memory_mb", "model", "nodes", "partial", "pool", "version")

    def __init__(self, pool: str, model: str):
        self.pool = pool
        self.model = model
        self.nodes: list[Node] = []  # every node of the pool with the model, schedulable or not
        self.buckets: list[list[int]] = []  # buckets[k]: orders of schedulable nodes with k free devices
        self.count: dict[int, int] = {}  # node order -> its current bucket
        self.partial: list[tuple[float, int]] = []  # (free share, device id) of partly used devices
        self.max_devices = 0  # most healthy devices of the model on one schedulable node
        self.capacity = 0.0  # healthy devices of the model on schedulable nodes
        self.all_counts: list[int] = []  # devices of the model per node, healthy or not
        self.healthy_counts: list[int] = []  # healthy devices per schedulable node
        self.min_memory_mb = 0  # the smallest device memory of the model in the group
        self.version = 0  # bumped whenever a node of the group changes (results computed on it go stale)
        self.device_ids: dict[str, set[int]] = {}  # node name -> ids of its devices of the model (filled lazily)
        self.blocks: dict[str, dict[str, list[Node]]] = {}  # topology label -> value -> nodes (``topology``)

    def max_free(self) -> int:
        """The largest number of whole free devices on a single node of this group."""
        for k in range(len(self.buckets) - 1, 0, -1):
            if self.buckets[k]:
                return k
        return 0

    def total_free(self) -> int:
        """Whole free devices over all schedulable nodes of the group."""
        return sum(k * len(b) for k, b in enumerate(self.buckets))


class Held:
    """A running (or terminating) job's hold on devices the snapshot knows, resolved once per cycle.
    Never changed once built; ``rec`` is what preemption derives from it (built on first use)."""

    __slots__ = ("amounts", "job", "nodes", "rec", "shares")

    def __init__(self, job: JobInfo):
        self.job = job
        self.shares: dict[int, float] = {}  # device id -> share
        self.nodes: list[Node] = []  # in placement order, each once
        self.amounts: dict[tuple[str, str], float] = {}  # (pool, model) -> GPUs held there
        self.rec: Running | None = None  # built on first use


class Cluster:
    """Devices, nodes and groups of one snapshot, with running jobs' placements already applied."""

    nodes: dict[str, Node]
    devices: dict[int, Device]
    groups: dict[tuple[str, str], Group]
    node_by_order: list[Node]
    # Per group: (node order, its healthy devices of the model) for each schedulable node, in order.
    sched: dict[tuple[str, str], list[tuple[int, list[Device]]]]

    def __init__(self, snapshot: Snapshot):
        self._build_static(snapshot.nodes)
        self.held: list[Held] = []
        for job in snapshot.jobs:
            if job.placements:
                self._hold_running(job)
        self._index_live()

    def _build_static(self, node_infos: tuple[NodeInfo, ...]) -> None:
        self.nodes = {}
        self.devices = {}
        self.groups = {}
        self.node_by_order = []
        self.sched = {}
        for order, info in enumerate(sorted(node_infos, key=lambda n: n.name)):
            node = Node(info, order)
            self.nodes[info.name] = node
            self.node_by_order.append(node)
            for gpu in sorted(info.gpus, key=lambda g: (g.index, g.id)):
                dev = Device(gpu.id, node, gpu.index, gpu.model, gpu.memory_mb, gpu.healthy, gpu.mig)
                self.devices[gpu.id] = dev
                node.by_model.setdefault(gpu.model, []).append(dev)
        for node in self.node_by_order:
            for model, devs in sorted(node.by_model.items()):
                key = (node.pool, model)
                group = self.groups.get(key)
                if group is None:
                    group = self.groups[key] = Group(node.pool, model)
                    self.sched[key] = []
                group.nodes.append(node)
                group.all_counts.append(len(devs))
                least = min(d.memory_mb for d in devs)
                group.min_memory_mb = least if len(group.nodes) == 1 else min(group.min_memory_mb, least)
                if not node.schedulable:
                    continue
                healthy = [d for d in devs if d.healthy]
                group.healthy_counts.append(len(healthy))
                group.max_devices = max(group.max_devices, len(healthy))
                group.capacity += len(healthy)
                self.sched[key].append((node.order, healthy))

    def _index_live(self) -> None:
        """Buckets by whole free devices, and partly used devices, from the devices' current state."""
        for key, group in self.groups.items():
            group.version = 0
            buckets: list[list[int]] = [[] for _ in range(group.max_devices + 1)]
            count: dict[int, int] = {}
            partial: list[tuple[float, int]] = []
            for order, healthy in self.sched[key]:
                k = 0
                for d in healthy:
                    free = d.free
                    if free > 1.0 - EPS:
                        k += 1
                    elif free > EPS:
                        partial.append((free, d.id))
                count[order] = k
                buckets[k].append(order)  # nodes come in order, so buckets stay sorted
            partial.sort()
            group.buckets, group.count, group.partial = buckets, count, partial

    def _hold_running(self, job: JobInfo) -> None:
        """Apply a running job's placements (and its CPU/RAM share) before groups are indexed."""
        held = Held(job)
        shares, nodes, amounts = held.shares, held.nodes, held.amounts
        devices = self.devices
        for p in job.placements:
            dev = devices.get(p.gpu_id)
            if dev is not None:
                dev.free -= p.share
                shares[p.gpu_id] = shares.get(p.gpu_id, 0.0) + p.share
                node = dev.node
                if node not in nodes:
                    nodes.append(node)
                key = (node.pool, dev.model)
                amounts[key] = amounts.get(key, 0.0) + p.share
        if shares:
            self._keep(held)

    def _keep(self, held: Held) -> None:
        """Count a running job's hold (its devices already taken): the list and its CPU/RAM share."""
        job = held.job
        self.held.append(held)
        if job.cpus or job.memory_mb:
            _charge_host(self, job, {n.name for n in held.nodes}, sign=-1.0)

    def take(self, job: JobInfo, placements: tuple[Placement, ...]) -> None:
        """Hold ``placements`` for ``job`` in the working copy, keeping the indexes in step."""
        self._move(job, placements, -1.0)

    def give_back(self, job: JobInfo, placements: tuple[Placement, ...]) -> None:
        """Undo ``take(job, placements)`` (a discarded statement)."""
        self._move(job, placements, 1.0)

    def _move(self, job: JobInfo, placements: tuple[Placement, ...], sign: float) -> None:
        touched: dict[str, Node] = {}
        changed: list[tuple[Device, float]] = []
        for p in placements:
            dev = self.devices[p.gpu_id]
            changed.append((dev, dev.free))
            dev.free += sign * p.share
            touched[dev.node.name] = dev.node
        for dev, old in changed:
            group = self.groups[(dev.node.pool, dev.model)]
            if EPS < old < 1.0 - EPS:
                i = bisect_left(group.partial, (old, dev.id))
                if i < len(group.partial) and group.partial[i] == (old, dev.id):
                    group.partial.pop(i)
            if dev.healthy and EPS < dev.free < 1.0 - EPS:
                insort(group.partial, (dev.free, dev.id))
        for node in touched.values():
            for model in node.by_model:
                self.rebucket(node, model)
            self.touch(node)
        _charge_host(self, job, set(touched), sign=sign)

    def touch(self, node: Node) -> None:
        """Mark every group that holds ``node`` as changed (its ``version`` moves on)."""
        for model in node.by_model:
            group = self.groups.get((node.pool, model))
            if group is not None:
                group.version += 1

    def rebucket(self, node: Node, model: str) -> None:
        """Move ``node`` to the bucket matching its current number of free ``model`` devices."""
        group = self.groups.get((node.pool, model))
        if group is None or node.order not in group.count:
            return
        old = group.count[node.order]
        new = node.whole_free(model)
        if new == old:
            return
        bucket = group.buckets[old]
        bucket.pop(bisect_left(bucket, node.order))
        insort(group.buckets[new], node.order)
        group.count[node.order] = new


def _charge_host(cluster: Cluster, job: JobInfo, node_names: set[str], sign: float) -> None:
    """Add (sign=+1) or remove (sign=-1) the job's CPUs and RAM, split evenly over its nodes."""
    if not node_names or (not job.cpus and not job.memory_mb):
        return
    n = len(node_names)
    for name in node_names:
        node = cluster.nodes[name]
        if node.cpus_free is not None and job.cpus:
            node.cpus_free += sign * job.cpus / n
        if node.mem_free is not None and job.memory_mb:
            node.mem_free += sign * job.memory_mb / n


def version_tuple(text: str) -> tuple[int, ...]:
    """Parse "550.54.15" into (550, 54, 15) so versions compare numerically; junk parts count as 0."""
    parts = []
    for piece in text.strip().split("."):
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        parts.append(int(digits) if digits else 0)
    while parts and parts[-1] == 0:
        parts.pop()
    return tuple(parts)
