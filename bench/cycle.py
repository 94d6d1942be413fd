"""The live scheduling cycle's cost, phase by phase: ``python bench/cycle.py --pending 10000 --nodes 1000``.

Writes the core benchmark's synthetic world (``scheduler.bench.build``: 8-GPU nodes of three models in three
pools, 24 teams with quotas, about 70% of the GPUs busy with running jobs, a mixed backlog; its times moved to
now, and running jobs started within their time limits) into a scratch
PostgreSQL database (dropped and created again: ``--database``, default ``rota_bench_cycle``), then runs
``scheduler.cycle.run_cycle`` several times in this process and prints, per cycle, its snapshot, engine and
persist times (milliseconds) with what it did. The first cycle starts whatever fits; later cycles are the
steady state a busy cluster sees between job ends (nothing finishes here, so they change little).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import random
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def setup_database(base_url: str, name: str) -> str:
    """Drop and create the scratch database; return its URL."""
    import psycopg

    with psycopg.connect(f"{base_url}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"{base_url}/{name}"


def seed(pending: int, nodes: int, seed_value: int) -> dict:
    """Write ``scheduler.bench.build(pending, nodes)`` into the (migrated, empty) database."""
    from django.contrib.auth import get_user_model
    from django.db import connection

    from portal.models import Membership, Team
    from scheduler.bench import MODELS, build
    from scheduler.core.types import RUNNING
    from scheduler.models import Allocation, Gpu, GpuModel, Job, JobTransition, Node, Pool, PriorityClass, Quota

    snap = build(pending, nodes, seed=seed_value)
    shift = time.time() - snap.now  # the synthetic world's times, moved to now

    def at(ts: float) -> datetime:
        return datetime.fromtimestamp(ts + shift, UTC)

    rng = random.Random(seed_value)
    started = {}  # running jobs started within their time limit: the cycle would time the others out
    for info in snap.jobs:
        if info.state == RUNNING:
            limit = info.time_limit_s
            started[info.id] = info.started_at if not limit or info.started_at + limit > snap.now + 600 else (
                snap.now - rng.uniform(0, 0.9 * limit))
    model_rows = {name: GpuModel.objects.create(name=name, memory_mb=mem) for name, mem, _pool, _share in MODELS}
    pools = {name: Pool.objects.create(name=name) for name in sorted({n.pool for n in snap.nodes})}
    teams: dict[str, Team] = {}
    for info in snap.teams:  # parents come first
        teams[info.name] = Team.objects.create(name=info.name, parent=teams.get(info.parent))
    for pool in pools.values():
        pool.teams.add(*teams.values())
    classes = {c.name: PriorityClass.objects.create(
        name=c.name, value=c.value, preemptible=c.preemptible, may_preempt=c.may_preempt,
        min_runtime_s=c.min_runtime_s, grace_period_s=c.grace_period_s) for c in snap.priority_classes}
    Quota.objects.bulk_create(Quota(team=teams[q.team], gpu_model=model_rows[q.gpu_model], guaranteed=q.guaranteed,
                                    limit=q.limit, weight=q.weight) for q in snap.quotas)
    User = get_user_model()
    users = {}
    for name, team in teams.items():
        users[name] = User.objects.create_user(username=f"u-{name}", password=None)
        Membership.objects.create(user=users[name], team=team, role=Membership.MEMBER)
    node_rows = Node.objects.bulk_create(Node(name=n.name, pool=pools[n.pool], state=Node.READY, cpus=n.cpus,
                                              memory_mb=n.memory_mb) for n in snap.nodes)
    node_of = {row.name: row for row in node_rows}
    gpu_rows = Gpu.objects.bulk_create(
        Gpu(node=node_of[n.name], index=g.index, uuid=f"GPU-{n.name}-{g.index}", model=model_rows[g.model],
            memory_mb=g.memory_mb) for n in snap.nodes for g in n.gpus)
    gpu_of = {(g.node.name, g.index): g for g in gpu_rows}
    gpu_by_core_id = {g.id: gpu_of[(n.name, g.index)] for n in snap.nodes for g in n.gpus}
    jobs = []
    for info in snap.jobs:
        running = info.state == RUNNING
        jobs.append(Job(
            team=teams[info.team], submitted_by=users[info.team], name=f"bench-{info.id}", command="true",
            kind=info.kind, gpus=info.gpus, gpu_fraction=info.gpu_fraction,
            gpu_model=model_rows[info.gpu_models[0]] if info.gpu_models else None, nodes=info.nodes,
            time_limit_minutes=int(info.time_limit_s // 60) if info.time_limit_s else None,
            priority_class=classes[info.priority_class], preemptible=info.preemptible,
            state="running" if running else "pending", attempt=1,
            admitted_at=at(started[info.id]) if running else None,
            started_at=at(started[info.id]) if running else None,
            attained_gpu_seconds=info.attained_gpu_s, pending_reason_code="" if running else "Scheduling"))
    rows = Job.objects.bulk_create(jobs, batch_size=2000)
    with connection.cursor() as cursor:  # created_at is set on insert: give each job its submission time
        cursor.execute("UPDATE scheduler_job j SET created_at = v.at FROM unnest(%s::bigint[], %s::timestamptz[]) "
                       "AS v(id, at) WHERE j.id = v.id",
                       [[r.pk for r in rows], [at(i.submitted_at) for i in snap.jobs]])
    JobTransition.objects.bulk_create(
        (JobTransition(job=r, from_state="", to_state=r.state, at=at(i.submitted_at), cause="bench")
         for r, i in zip(rows, snap.jobs, strict=True)), batch_size=5000)
    Allocation.objects.bulk_create(
        (Allocation(job=r, attempt=1, gpu=gpu_by_core_id[p.gpu_id], node=gpu_by_core_id[p.gpu_id].node,
                    share_milli=round(p.share * 1000), started_at=at(started[i.id]))
         for r, i in zip(rows, snap.jobs, strict=True) for p in i.placements), batch_size=5000)
    return {"nodes": len(snap.nodes), "gpus": len(gpu_rows), "running": sum(1 for j in snap.jobs if j.placements),
            "pending": sum(1 for j in snap.jobs if not j.placements)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/cycle.py", description=__doc__.splitlines()[0])
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--cycles", type=int, default=4, help="cycles to run one after the other")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--database", default="rota_bench_cycle", help="scratch database (dropped and created)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--profile", metavar="FILE", help="write a cProfile of the cycles after the first to FILE "
                        "(read it with python -m pstats FILE)")
    args = parser.parse_args(argv)
    if args.pending < 0 or args.nodes < 1 or args.cycles < 1:
        parser.error("--pending must be >= 0, --nodes >= 1 and --cycles >= 1")
    base_url = os.environ.get("ROTA_BENCH_DATABASE_URL", "postgres://postgres@localhost:5432")
    os.environ["DATABASE_URL"] = setup_database(base_url, args.database)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    os.environ.setdefault("REDIS_URL", "filesystem")  # the cycle sends nothing; keep the broker out of it
    import django

    django.setup()
    from django.core.management import call_command

    from scheduler.cycle import run_cycle

    t0 = time.perf_counter()
    call_command("migrate", verbosity=0)
    world = seed(args.pending, args.nodes, args.seed)
    world["seed_s"] = round(time.perf_counter() - t0, 1)
    cycles = []
    profiler = cProfile.Profile() if args.profile else None
    for n in range(args.cycles):
        if profiler and n == 1:
            profiler.enable()
        t, cpu = time.perf_counter(), time.process_time()
        report = run_cycle()
        total, cpu = (time.perf_counter() - t) * 1000, (time.process_time() - cpu) * 1000
        cycles.append({"total_ms": round(total, 1), "cpu_ms": round(cpu, 1),
                       **{k: round(v, 1) for k, v in report.phases_ms.items()},
                       "started": report.started, "preempted": report.preempted, "pending": report.pending})
    if profiler:
        profiler.disable()
        profiler.dump_stats(args.profile)
    steady = cycles[1:] or cycles
    result = {**world, "cycles": cycles,
              "steady_median_ms": {k: round(statistics.median(c[k] for c in steady), 1)
                                   for k in ("total_ms", "cpu_ms", "snapshot", "engine", "persist")}}
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        print(f"{world['pending']} pending, {world['running']} running on {world['nodes']} nodes "
              f"({world['gpus']} GPUs); seeded in {world['seed_s']} s")
        for n, c in enumerate(cycles, start=1):
            print(f"cycle {n}: {c['total_ms']:8.1f} ms, CPU {c['cpu_ms']:7.1f} ms  (snapshot {c['snapshot']:7.1f}, "
                  f"engine {c['engine']:7.1f}, "
                  f"persist {c['persist']:7.1f})  {c['started']} started, {c['preempted']} preempted, "
                  f"{c['pending']} pending updated")
        s = result["steady_median_ms"]
        print(f"steady state (median of cycles 2+): {s['total_ms']} ms (this process's CPU {s['cpu_ms']} ms): "
              f"snapshot {s['snapshot']}, "
              f"engine {s['engine']}, persist {s['persist']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
