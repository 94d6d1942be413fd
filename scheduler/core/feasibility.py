"""Static feasibility: which (pool, model) groups could ever hold a job, and if none, which constraint
fails. Computed once per distinct request shape in a cycle (jobs of the same shape share the answer).

The ladder of constraints, checked in order so the message names the first that fails:
pool access -> GPU model present -> GPUs per node -> GPU memory -> node labels -> driver version ->
host CPUs/RAM -> health (schedulable nodes, healthy devices).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from scheduler.core import reasons as R
from scheduler.core.cluster import Cluster, Group, Node
from scheduler.core.placement import Request
from scheduler.core.types import JobInfo, Reason

_reason = R.reasoner("placement")  # reasons of the placement plugin


@dataclass(frozen=True, slots=True)
class Feasibility:
    """Groups to try in order, or the reason none can work."""

    groups: tuple[Group, ...]
    reason: Reason | None
    models: frozenset[str] = field(init=False)  # the models of ``groups``

    def __post_init__(self) -> None:
        object.__setattr__(self, "models", frozenset(g.model for g in self.groups))


def shape_text(req: Request) -> str:
    """Human words for the request's shape, e.g. "4 GPUs on one node" or "2 nodes x 8 GPUs"."""
    if req.fraction is not None:
        return f"{R.fmt_gpus(req.fraction)} of one GPU"
    if req.nodes and req.nodes > 1:
        return f"{req.nodes} nodes x {req.gpus // req.nodes} GPUs"
    return f"{req.gpus} GPU{'s' if req.gpus != 1 else ''}"


def _fits(counts: Sequence[int], req: Request, max_one: int) -> bool:
    """Could the request fit in nodes offering ``counts`` devices each (largest single node: max_one)?"""
    if req.fraction is not None:
        return any(c >= 1 for c in counts)
    if req.nodes is not None and req.nodes > 1:
        if req.gpus % req.nodes:
            return False
        per = req.gpus // req.nodes
        return sum(1 for c in counts if c >= per) >= req.nodes
    if req.nodes == 1 or req.gpus <= max_one:
        return any(c >= req.gpus for c in counts)
    return sum(counts) >= req.gpus


def analyse(cluster: Cluster, job: JobInfo, req: Request, pools: Sequence[str], models: Sequence[str]) -> Feasibility:
    """Decide which groups could hold ``job`` (``pools`` allowed to its team, ``models`` it accepts)."""
    groups = [cluster.groups[(p, m)] for m in models for p in pools if (p, m) in cluster.groups]
    if not groups:
        accepted = ", ".join(models) or "any model"
        return Feasibility((), _reason(
            R.NO_MATCHING_GPU_MODEL,
            f"no node in pool(s) {', '.join(pools)} carries an accepted GPU model ({accepted})",
            gpu_models=list(models), pools=list(pools),
        ))
    n_parts = req.nodes if req.nodes and req.nodes > 1 else 1
    if req.nodes and req.nodes > 1 and req.gpus % req.nodes:
        return Feasibility((), _reason(
            R.UNSATISFIABLE, f"{req.gpus} GPUs do not split evenly over {req.nodes} nodes",
            requested=req.gpus, nodes=req.nodes,
        ))
    max_one_all = max(max(g.all_counts, default=0) for g in groups)
    if not req.constrained and all(req.min_memory_mb <= g.min_memory_mb for g in groups):
        # Fast path: only device counts matter, and every group has them precomputed.
        if not any(_fits(g.all_counts, req, max_one_all) for g in groups):
            return Feasibility((), _unsatisfiable("gpus", job, req, groups, max_one_all))
        healthy = [g for g in groups if _fits(g.healthy_counts, req, g.max_devices)]
        return _healthy_or_reason(healthy, groups, req, lambda n: True)
    ladder: list[tuple[str, Callable[[Node, Group], int]]] = [
        ("gpus", lambda n, g: len(n.by_model.get(g.model, ()))),
        ("memory", lambda n, g: sum(1 for d in n.by_model.get(g.model, ()) if d.memory_mb >= req.min_memory_mb)),
    ]
    static = [
        ("labels", lambda n: all(n.info.labels.get(k) == v for k, v in req.labels)),
        ("driver", lambda n: not req.min_driver or n.driver >= req.min_driver),
        ("host", lambda n: (not req.cpus or not n.info.cpus or n.info.cpus >= req.cpus / n_parts)
         and (not req.memory_mb or not n.info.memory_mb or n.info.memory_mb >= req.memory_mb / n_parts)),
    ]
    mem = ladder[1][1]
    for name, count in ladder:
        if not any(_fits([count(n, g) for n in g.nodes], req, max_one_all) for g in groups):
            return Feasibility((), _unsatisfiable(name, job, req, groups, max_one_all))
    passing = list(groups)
    preds: list[Callable[[Node], bool]] = []

    def node_ok(n: Node) -> bool:
        return all(p(n) for p in preds)

    for name, pred in static:
        preds.append(pred)
        ok = [g for g in passing if _fits([mem(n, g) if node_ok(n) else 0 for n in g.nodes], req, max_one_all)]
        if not ok:
            return Feasibility((), _unsatisfiable(name, job, req, groups, max_one_all))
        passing = ok
    healthy = []
    for g in passing:
        counts = [
            sum(1 for d in n.by_model.get(g.model, ()) if d.healthy and d.memory_mb >= req.min_memory_mb)
            if n.schedulable and node_ok(n) else 0
            for n in g.nodes
        ]
        if _fits(counts, req, g.max_devices):
            healthy.append(g)
    return _healthy_or_reason(healthy, passing, req, node_ok)


def _healthy_or_reason(healthy: list[Group], passing: Sequence[Group], req: Request,
                       node_ok: Callable[[Node], bool]) -> Feasibility:
    """The groups that can hold the job now, or NodesUnhealthy naming the nodes that could, but are down,
    draining or have unhealthy GPUs (and, when some could still be used, how many: too few for the job)."""
    if healthy:
        return Feasibility(tuple(healthy), None)
    out: set[str] = set()
    usable: set[str] = set()
    for g in passing:
        for n in g.nodes:
            if node_ok(n):
                whole = n.schedulable and all(d.healthy for d in n.by_model.get(g.model, ()))
                (usable if whole else out).add(n.name)
    names = sorted(out - usable)
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    rest = f"; {len(usable)} usable node(s) are not enough" if usable else ""
    return Feasibility((), _reason(
        R.NODES_UNHEALTHY,
        f"the nodes that could hold {shape_text(req)} are down, draining or have unhealthy GPUs: {shown}{rest}",
        nodes=names, usable_nodes=len(usable),
    ))


def _unsatisfiable(constraint: str, job: JobInfo, req: Request, groups: Sequence[Group], max_one: int) -> Reason:
    """The Unsatisfiable reason naming the first failing constraint."""
    models = ", ".join(sorted({g.model for g in groups}))
    if constraint == "gpus":
        if req.nodes and req.nodes > 1:
            msg = f"needs {shape_text(req)} of {models}; not enough nodes have that many GPUs"
        elif req.nodes == 1 or req.gpus <= max_one or req.fraction is not None:
            msg = f"needs {shape_text(req)} of {models} on one node; the largest node has {max_one}"
        else:
            total = sum(len(n.by_model.get(g.model, ())) for g in groups for n in g.nodes)
            msg = f"needs {shape_text(req)} of {models}; the allowed pools have {total} in all"
        return _reason(R.UNSATISFIABLE, msg, constraint="gpus_per_node", requested=req.gpus,
                        largest_node=max_one, gpu_models=sorted({g.model for g in groups}))
    if constraint == "memory":
        most = max((d.memory_mb for g in groups for n in g.nodes for d in n.by_model.get(g.model, ())), default=0)
        wanted = f"GPUs with {req.min_memory_mb} MiB memory"
        if req.fraction is not None:
            wanted = f"{job.gpu_memory_mb} MiB in a {req.fraction:g} share, i.e. {wanted}"
        return _reason(R.UNSATISFIABLE, f"needs {wanted}; the largest {models} has {most} MiB",
                        constraint="gpu_memory", requested_mb=req.min_memory_mb, largest_mb=most)
    if constraint == "labels":
        wanted = ", ".join(f"{k}={v}" for k, v in req.labels)
        return _reason(R.UNSATISFIABLE, f"no node with {models} has the labels {wanted}",
                        constraint="node_labels", labels=dict(req.labels))
    if constraint == "driver":
        return _reason(R.UNSATISFIABLE,
                        f"no node with {models} has driver >= {job.min_driver_version}",
                        constraint="driver_version", min_driver_version=job.min_driver_version)
    return _reason(R.UNSATISFIABLE,
                    f"no node with {models} has {req.cpus} CPUs and {req.memory_mb} MiB RAM for the job",
                    constraint="host_resources", cpus=req.cpus, memory_mb=req.memory_mb)
