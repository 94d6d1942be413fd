"""``python -m scheduler.bench --pending N --nodes M [--json]``: the engine's cycle cost.

Builds a synthetic cluster (8 GPUs per node, mixed models and pools) and a backlog (mixed sizes, teams,
priorities, fractions, multi-node gangs; about 70% of the GPUs already busy with running jobs), settles the
backlog with one cycle (starts run, victims leave), then times a steady-state ``schedule()`` by phase, the
time of ``check_invariants``, and the time of a plain ``sorted()`` over the same pending jobs as a reference
(with the ratio cycle / sort; both are the best of their runs, taken in turn). The first, unsettled cycle
is reported too.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import replace

from scheduler.core import check_invariants, schedule
from scheduler.core.policies import policy_by_name
from scheduler.core.types import (
    PENDING,
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

MODELS = (("h100-80gb", 81920, "train-h100", 0.5), ("a100-40gb", 40960, "train-a100", 0.3),
          ("l40s-48gb", 49152, "inference", 0.2))
CLASSES = (
    PriorityClassInfo("production-inference", 1000, preemptible=False),
    PriorityClassInfo("interactive", 800),
    PriorityClassInfo("training", 500, min_runtime_s=600, grace_period_s=120),
    PriorityClassInfo("batch", 300),
    PriorityClassInfo("best-effort", 100, grace_period_s=10),
)
SIZES = ((1, 0.45), (2, 0.2), (4, 0.15), (8, 0.12), (16, 0.03), (0.5, 0.05))


def build(pending: int, nodes: int, seed: int = 7, policy: str = "rota", teams: int = 24) -> Snapshot:
    """A reproducible synthetic snapshot with ``pending`` waiting jobs on ``nodes`` 8-GPU nodes."""
    rng = random.Random(seed)
    now = 1_000_000.0
    node_infos = []
    gid = 0
    capacity: dict[str, int] = {}
    for i in range(nodes):
        r, acc = rng.random(), 0.0
        model, mem, pool = MODELS[-1][:3]
        for m, mm, p, share in MODELS:
            acc += share
            if r < acc:
                model, mem, pool = m, mm, p
                break
        gpus = tuple(GpuDevice(gid + k, f"node-{i:05d}", k, model, mem) for k in range(8))
        gid += 8
        node_infos.append(NodeInfo(f"node-{i:05d}", pool, gpus, cpus=128, memory_mb=1_024_000))
        capacity[model] = capacity.get(model, 0) + 8
    team_names = [f"team-{t:02d}" for t in range(teams)]
    team_infos = [TeamInfo("dept-a"), TeamInfo("dept-b")] + [
        TeamInfo(t, parent="dept-a" if k % 2 else "dept-b") for k, t in enumerate(team_names)]
    quotas = []
    for model, cap in sorted(capacity.items()):
        for k, t in enumerate(team_names):
            g = cap * 0.8 / teams
            quotas.append(QuotaInfo(t, model, guaranteed=round(g), limit=round(cap * 0.4), weight=1 + k % 3))
    jobs: list[JobInfo] = []
    # Running jobs: fill about 70% of every node, whole devices.
    jid = 1
    for n in node_infos:
        used = 0
        target = rng.choice((4, 6, 8, 8))
        while used < target:
            size = min(rng.choice((1, 2, 4)), target - used)
            devs = n.gpus[used:used + size]
            used += size
            cls = rng.choice(CLASSES[1:])
            jobs.append(JobInfo(
                id=jid, team=rng.choice(team_names), priority_class=cls.name, priority=cls.value, gpus=size,
                gpu_models=(devs[0].model,), state=RUNNING, started_at=now - rng.uniform(0, 86400),
                time_limit_s=rng.choice((3600.0, 4 * 3600.0, 24 * 3600.0, None)),
                placements=tuple(Placement(d.id) for d in devs), submitted_at=now - 90000))
            jid += 1
    weights = [w for _, w in SIZES]
    for _ in range(pending):
        size = rng.choices([s for s, _ in SIZES], weights)[0]
        cls = rng.choice(CLASSES)
        model = rng.choice(MODELS)[0]
        kw: dict = {}
        if size == 0.5:
            kw["gpu_fraction"], size = 0.5, 1
        elif size == 16:
            kw["nodes"] = 2
        jobs.append(JobInfo(
            id=jid, team=rng.choice(team_names), priority_class=cls.name, priority=cls.value, gpus=int(size),
            gpu_models=(model,) if rng.random() < 0.8 else (), preemptible=cls.preemptible,
            submitted_at=now - rng.uniform(0, 86400), time_limit_s=rng.choice((1800.0, 3600.0, 4 * 3600.0, None)),
            state=PENDING, attained_gpu_s=rng.uniform(0, 1e5), **kw))
        jid += 1
    usage = {t: rng.uniform(0, 1e7) for t in team_names}
    return Snapshot(now=now, nodes=tuple(node_infos), jobs=tuple(jobs), teams=tuple(team_infos),
                    quotas=tuple(quotas), priority_classes=CLASSES, usage=usage, policy=policy_by_name(policy))


def settle(snapshot: Snapshot) -> Snapshot:
    """Apply one cycle's decisions (starts run, victims are gone and requeued) to reach a steady state."""
    decisions = schedule(snapshot)
    jobs = {j.id: j for j in snapshot.jobs}
    for start in decisions.starts:
        jobs[start.job_id] = replace(jobs[start.job_id], state=RUNNING, placements=start.placements,
                                     started_at=snapshot.now)
    for pre in decisions.preemptions:
        jobs[pre.job_id] = replace(jobs[pre.job_id], state=PENDING, placements=(), started_at=None)
    return replace(snapshot, now=snapshot.now + 60.0, jobs=tuple(jobs[k] for k in sorted(jobs)))


def measure(snapshot: Snapshot, repeat: int = 3) -> dict:
    """Time ``schedule`` (by phase), ``check_invariants`` and the ``sorted()`` reference; best of ``repeat``
    for the cycle, and best of three sorts after each cycle for the reference: the same statistic, taken
    in the same moments, so a noisy machine moves both figures of the ratio alike."""
    pending = [j for j in snapshot.jobs if j.state == PENDING]
    runs = []
    sort_times = []
    decisions = None
    for _ in range(repeat):
        # New job objects each time, as the live cycle reads them from the database: the engine's
        # per-object reuse between cycles (a simulator's running jobs) must not flatter the figure.
        snapshot = replace(snapshot, jobs=tuple(replace(j) for j in snapshot.jobs))
        phases: dict[str, float] = {}
        last = [time.perf_counter()]

        def timer(name: str, phases=phases, last=last) -> None:
            t = time.perf_counter()
            phases[name] = phases.get(name, 0.0) + (t - last[0]) * 1000
            last[0] = t

        t0 = time.perf_counter()
        decisions = schedule(snapshot, timer=timer)
        phases["total"] = (time.perf_counter() - t0) * 1000
        runs.append(phases)
        for _ in range(3):
            t0 = time.perf_counter()
            sorted(pending, key=lambda j: (-j.priority, j.submitted_at, j.id))
            sort_times.append((time.perf_counter() - t0) * 1000)
    best = min(runs, key=lambda p: p["total"])
    t0 = time.perf_counter()
    violations = check_invariants(snapshot, decisions)
    inv_ms = (time.perf_counter() - t0) * 1000
    sort_ms = min(sort_times)
    return {
        "pending": len(pending),
        "nodes": len(snapshot.nodes),
        "gpus": sum(len(n.gpus) for n in snapshot.nodes),
        "running": sum(1 for j in snapshot.jobs if j.state == RUNNING),
        "policy": snapshot.policy.name,
        "cycle_ms": round(best["total"], 2),
        "phases_ms": {k: round(v, 2) for k, v in best.items() if k != "total"},
        "invariants_ms": round(inv_ms, 2),
        "sort_ms": round(sort_ms, 2),
        "ratio": round(best["total"] / sort_ms, 2) if sort_ms else None,
        "starts": len(decisions.starts),
        "preemptions": len(decisions.preemptions),
        "violations": len(violations),
        "stats": dict(decisions.stats),
    }


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(prog="python -m scheduler.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--pending", type=int, default=10_000, help="pending jobs in the backlog")
    parser.add_argument("--nodes", type=int, default=1_000, help="8-GPU nodes in the cluster")
    parser.add_argument("--policy", default="rota", help="policy preset: fifo, slurm, tiresias, rota")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=3, help="cycles to run (the best is reported)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.pending < 0 or args.nodes < 1:
        parser.error("--pending must be >= 0 and --nodes >= 1")
    t0 = time.perf_counter()
    snapshot = build(args.pending, args.nodes, seed=args.seed, policy=args.policy)
    build_ms = (time.perf_counter() - t0) * 1000
    cold = measure(snapshot, repeat=1)
    snapshot = settle(snapshot)
    result = measure(snapshot, repeat=args.repeat)
    result["build_ms"] = round(build_ms, 2)
    result["first_cycle"] = {k: cold[k] for k in ("cycle_ms", "ratio", "starts", "preemptions", "violations")}
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        print(f"{result['pending']} pending, {result['running']} running, {result['nodes']} nodes "
              f"({result['gpus']} GPUs), policy {result['policy']}")
        print(f"cycle     {result['cycle_ms']:10.2f} ms")
        for name, ms in result["phases_ms"].items():
            print(f"  {name:<8}{ms:10.2f} ms")
        print(f"invariants{result['invariants_ms']:10.2f} ms   (checked separately, {result['violations']} violations)")
        print(f"sort ref  {result['sort_ms']:10.2f} ms   ratio cycle/sort {result['ratio']}x")
        print(f"decisions: {result['starts']} starts, {result['preemptions']} preemptions")
        first = result["first_cycle"]
        print(f"first cycle on the unsettled backlog: {first['cycle_ms']} ms (ratio {first['ratio']}x), "
              f"{first['starts']} starts, {first['preemptions']} preemptions")
    return 1 if result["violations"] or result["first_cycle"]["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
