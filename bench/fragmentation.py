"""GPU fragmentation on the Alibaba openb trace: Rota's packing of GPU shares against plain best fit.

The trace's intended use (its README; "Beware of Fragmentation", ATC'23): place pods in arrival order on the
1,213-node, 6,212-GPU cluster, nothing ever ends, and watch how much GPU capacity stays unallocated as the
arrived demand grows past the cluster's size. The default pod list (GPU pods in creation order, 98% of the
cluster) is followed by pods drawn from it at random (seeded) until the arrived demand reaches ``--upto`` of
capacity; a pod that fits nowhere when it arrives fails and is dropped.

Both policies run the engine's own code (``Session``, feasibility, ``plugins.placement``, ``Cluster.take``):
the same GPU-type constraints, host CPUs and memory, and the same order of groups (pool × model). They differ
in where a *share* of a GPU goes:

- ``rota``: the sharing plugin: the partly used device with the least room that still fits it, else an idle
  device on the best-fitting node (``scheduler/core/plugins/sharing.py``);
- ``best-fit``: plain best fit by node: the node with the least free GPU capacity that can hold the share,
  and on it the first device with room (device index order).

Whole-GPU pods go to the best-fitting node in both. Prints, per arrived demand, the unallocated share of the
cluster's GPUs (and how much of it sits on full hosts: nodes whose CPUs or RAM left cannot take the median
pod), the whole GPUs left idle and the pods that failed. Run:
``.venv/bin/python bench/fragmentation.py [--pods FILE] [--upto 1.3] [--seed 1]``.
"""

from __future__ import annotations

import argparse
import csv
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduler.core.cluster import EPS, Cluster, Group  # noqa: E402
from scheduler.core.placement import Request, fits_host  # noqa: E402
from scheduler.core.plugins import placement  # noqa: E402
from scheduler.core.session import Session  # noqa: E402
from scheduler.core.types import GpuDevice, JobInfo, NodeInfo, Placement, Snapshot  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# ../shared beside the checkout (a worktree one level deeper finds it two levels up)
TRACE = next((p / "shared/traces/alibaba-gpu-2023-openb/csv" for p in (ROOT.parent, ROOT.parent.parent)
              if (p / "shared/traces/alibaba-gpu-2023-openb/csv").is_dir()), ROOT.parent / "shared")
LEVELS = (0.8, 0.9, 1.0, 1.1, 1.2, 1.3)


def load_nodes(path: Path) -> tuple[NodeInfo, ...]:
    """The trace's GPU nodes: CPUs and memory as given, ``gpu`` devices of ``model`` each."""
    nodes, gid = [], 0
    with path.open() as f:
        for row in csv.DictReader(f):
            devs = []
            for i in range(int(row["gpu"])):
                gid += 1
                devs.append(GpuDevice(gid, row["sn"], i, row["model"], 16384))
            nodes.append(NodeInfo(row["sn"], "openb", tuple(devs), cpus=int(row["cpu_milli"]) // 1000,
                                  memory_mb=int(row["memory_mib"])))
    return tuple(nodes)


def load_pods(path: Path) -> list[JobInfo]:
    """The trace's GPU pods in creation order (CPU-only pods are left out)."""
    rows = []
    with path.open() as f:
        for row in csv.DictReader(f):
            if int(row["num_gpu"]) <= 0:
                continue
            rows.append(row)
    rows.sort(key=lambda r: int(r.get("creation_time") or 0))
    pods = []
    for i, row in enumerate(rows):
        gpus, milli = int(row["num_gpu"]), int(row["gpu_milli"])
        spec = tuple(m for m in (row.get("gpu_spec") or "").split("|") if m)
        pods.append(JobInfo(i + 1, "t", gpus=gpus, gpu_fraction=milli / 1000 if gpus == 1 and milli < 1000 else None,
                            gpu_models=spec, cpus=int(row["cpu_milli"]) // 1000, memory_mb=int(row["memory_mib"])))
    return pods


def best_fit_share(cluster: Cluster, group: Group, req: Request) -> tuple[Placement, ...] | None:
    """Plain best fit for a share: the node with the least free GPU capacity that has a device with room
    for it, and the first such device there."""
    f = req.fraction
    assert f is not None
    best: tuple[float, int, int] | None = None
    for node in group.nodes:
        if node.order not in group.count or not fits_host(node, req, 1):
            continue
        devs = [d for d in node.by_model[group.model] if d.healthy]
        room = next((d for d in devs if d.free >= f - EPS), None)
        if room is None:
            continue
        left = sum(d.free for d in devs)
        if best is None or (left, node.order) < best[:2]:
            best = (left, node.order, room.id)
    return None if best is None else (Placement(best[2], f),)


def run(nodes: tuple[NodeInfo, ...], pods: list[JobInfo], policy: str, upto: float, seed: int) -> list[tuple]:
    """Place pods until the arrived demand reaches ``upto`` of capacity; one row per level in ``LEVELS``."""
    s = Session(Snapshot(now=0.0, nodes=nodes, jobs=()))
    cluster = s.cluster
    capacity = sum(len(n.gpus) for n in nodes)
    rng = random.Random(seed)
    arrived = allocated = 0.0
    failed = 0
    rows: list[tuple] = []
    levels = [x for x in LEVELS if x <= upto + EPS]
    cpus, mem = statistics.median(p.cpus for p in pods), statistics.median(p.memory_mb for p in pods)
    i = 0
    while levels:
        job = pods[i] if i < len(pods) else pods[rng.randrange(len(pods))]
        i += 1
        req = s.request(job)
        arrived += req.amount
        placed = None
        for group in s.feasibility(job, req).groups:
            if req.fraction is not None and policy == "best-fit":
                placed = best_fit_share(cluster, group, req)
            else:
                placed = placement.place(cluster, group, req, False)
            if placed is not None:
                break
        if placed is None:
            failed += 1
        else:
            cluster.take(job, placed)
            allocated += req.amount
        while levels and arrived >= levels[0] * capacity:
            idle = sum(1 for d in cluster.devices.values() if d.free > 1.0 - EPS)
            # unallocated GPU capacity on nodes whose host cannot take the median pod: stranded by CPUs or RAM
            stranded = sum(d.free for d in cluster.devices.values()
                           if (d.node.cpus_free or 0.0) < cpus or (d.node.mem_free or 0.0) < mem)
            rows.append((levels.pop(0), 1.0 - allocated / capacity, idle, failed, stranded / capacity))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=Path, default=TRACE / "openb_pod_list_default.csv")
    parser.add_argument("--nodes", type=Path, default=TRACE / "openb_node_list_gpu_node.csv")
    parser.add_argument("--upto", type=float, default=1.3, help="stop when the arrived demand reaches this share")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    nodes, pods = load_nodes(args.nodes), load_pods(args.pods)
    shares = sum(1 for p in pods if p.gpu_fraction is not None)
    print(f"{args.pods.name}: {len(pods)} GPU pods ({shares} shares of a GPU), {len(nodes)} nodes, "
          f"{sum(len(n.gpus) for n in nodes)} GPUs")
    results = {policy: run(nodes, pods, policy, args.upto, args.seed) for policy in ("best-fit", "rota")}
    print("arrived  policy    unallocated GPUs  of it on full hosts  idle whole GPUs  failed pods")
    for a, b in zip(results["best-fit"], results["rota"], strict=True):
        for policy, row in (("best-fit", a), ("rota", b)):
            print(f"{row[0]:>6.0%}   {policy:<8}  {row[1]:>15.1%}  {row[4]:>19.1%}  {row[2]:>15d}  {row[3]:>11d}")

if __name__ == "__main__":
    main()
