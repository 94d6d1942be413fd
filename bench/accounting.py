"""The accounting pages' cost at scale: ``python bench/accounting.py --nodes 20 --days 30``.

Writes a month of finished GPU work into a scratch PostgreSQL database (dropped and created again:
``--database``, default ``rota_bench_accounting``): ``--nodes`` 8-GPU nodes, each GPU busy about 70% of the time
with jobs of 1 to 8 GPUs lasting 1 to 12 hours, owned by 12 teams in two departments. Telemetry is what a
running portal keeps: one raw sample per GPU a minute for the last ``RAW_RETENTION`` (24 h), hourly rollups
before that. The ledger is built by the real ``usage_rollup``. Then it times, best of ``--repeat``, the
usage lines behind every accounting page and export (``accounting.selectors.usage_lines``: the last 30 days by
day, the last 7 days by hour, one team's month) and the pages themselves through Django's test client (the
dashboard as a platform admin, as finance and as a member; the chargeback CSV), and prints them in
milliseconds with the ledger's size.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from cycle import setup_database  # noqa: E402  (bench/ is on the path: the scratch-database helper)

HOUR = timedelta(hours=1)


def seed(nodes: int, days: int, seed_value: int) -> dict:
    """Nodes, teams, users and ``days`` of finished jobs with allocations, samples and rollups."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.core.management import call_command
    from django.db import connection

    from accounting.models import UsageRecord
    from accounting.services import usage_rollup
    from portal.access import FINANCE_GROUP
    from portal.models import Membership, Team
    from scheduler.models import (
        Allocation,
        Gpu,
        GpuModel,
        GpuSample,
        GpuSampleRollup,
        Job,
        JobTransition,
        Node,
        Pool,
        PriorityClass,
    )
    from scheduler.services.telemetry import RAW_RETENTION

    rng = random.Random(seed_value)
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    begin = now - timedelta(days=days)
    raw_from = now - RAW_RETENTION
    model = GpuModel.objects.create(name="h100-80gb", memory_mb=81559)
    pool = Pool.objects.create(name="train")
    depts = [Team.objects.create(name=f"dept-{d}") for d in "ab"]
    teams = [Team.objects.create(name=f"team-{t:02d}", parent=depts[t % 2]) for t in range(12)]
    pool.teams.add(*teams)
    training = PriorityClass.objects.create(name="training", value=500)
    User = get_user_model()
    users = []
    for team in teams:
        for k in range(2):
            user = User.objects.create_user(username=f"{team.name}-u{k}", password="bench")
            Membership.objects.create(user=user, team=team, role=Membership.MEMBER)
            users.append((user, team))
    User.objects.create_user(username="root", password="bench", is_staff=True, is_superuser=True)
    User.objects.create_user(username="fin", password="bench").groups.add(Group.objects.create(name=FINANCE_GROUP))
    call_command("seed_rates", stdout=open(os.devnull, "w"))
    node_rows = Node.objects.bulk_create(Node(name=f"gpu-{i:03d}", pool=pool, state=Node.READY) for i in range(nodes))
    gpus = Gpu.objects.bulk_create(Gpu(node=n, index=k, uuid=f"GPU-{n.name}-{k}", model=model, memory_mb=81559)
                                   for n in node_rows for k in range(8))
    by_node = {}
    for g in gpus:
        by_node.setdefault(g.node_id, []).append(g)
    plans = []  # (user, team, gpus, start, end)
    for node in node_rows:
        lanes, used = [], 0
        while used < 8:  # the node's GPUs split into lanes of 1, 2, 4 or 8, each running jobs back to back
            size = min(rng.choice((1, 1, 2, 4, 8)), 8 - used)
            lanes.append(by_node[node.pk][used:used + size])
            used += size
        for lane in lanes:
            t = begin + timedelta(minutes=rng.uniform(0, 600))
            while t < now:
                end = min(t + timedelta(hours=rng.uniform(1, 12)), now - timedelta(minutes=1))
                if end > t:
                    user, team = rng.choice(users)
                    plans.append((user, team, lane, t, end))
                t = end + timedelta(hours=rng.uniform(0, 5))  # about 70% busy
    jobs = Job.objects.bulk_create(
        (Job(team=team, submitted_by=user, name=f"bench-{i}", command="true", gpus=len(lane), gpu_model=model,
             priority_class=training, state="succeeded", attempt=1, exit_code=0, admitted_at=start,
             started_at=start, finished_at=end)
         for i, (user, team, lane, start, end) in enumerate(plans)), batch_size=2000)
    Allocation.objects.bulk_create(
        (Allocation(job=job, attempt=1, gpu=g, node_id=g.node_id, started_at=start, ended_at=end)
         for job, (_u, _t, lane, start, end) in zip(jobs, plans, strict=True) for g in lane), batch_size=5000)
    # Each job waited a while before it started, and its history says so: the pages' wait, queue, failure
    # and fairness sections read these.
    submitted = [start - timedelta(minutes=rng.uniform(1, 240)) for (_u, _t, _l, start, _e) in plans]
    with connection.cursor() as cursor:
        cursor.execute("UPDATE scheduler_job j SET created_at = v.at FROM unnest(%s::bigint[], %s::timestamptz[]) "
                       "AS v(id, at) WHERE j.id = v.id", [[j.pk for j in jobs], submitted])
    JobTransition.objects.bulk_create(
        (JobTransition(job=job, from_state=before, to_state=after, at=at, cause="bench")
         for job, sub_at, (_u, _t, _l, start, end) in zip(jobs, submitted, plans, strict=True)
         for before, after, at in (("", "pending", sub_at), ("pending", "admitted", start),
                                   ("admitted", "starting", start), ("starting", "running", start),
                                   ("running", "succeeded", end))), batch_size=10000)

    def samples():
        for job, (_u, _t, lane, start, end) in zip(jobs, plans, strict=True):
            if end <= raw_from:
                continue
            base = rng.uniform(20, 95)
            minute = max(start, raw_from).replace(second=0, microsecond=0) + timedelta(minutes=1)
            while minute < end:
                for g in lane:
                    yield GpuSample(gpu=g, node_id=g.node_id, job=job, at=minute,
                                    util_pct=min(100.0, max(0.0, base + rng.uniform(-15, 15))))
                minute += timedelta(minutes=1)

    def rollups():
        for job, (_u, _t, lane, start, end) in zip(jobs, plans, strict=True):
            hour = start.replace(minute=0, second=0, microsecond=0)
            base = rng.uniform(20, 95)
            while hour < min(end, raw_from):
                for g in lane:
                    yield GpuSampleRollup(gpu=g, job=job, hour=hour, samples=60, util_avg=base + rng.uniform(-5, 5))
                hour += HOUR

    n_samples = len(GpuSample.objects.bulk_create(samples(), batch_size=10000))
    n_rollups = len(GpuSampleRollup.objects.bulk_create(rollups(), batch_size=10000))
    report = usage_rollup(until=now, full=True)
    while report.days:  # the summed days catch up a week a rollup, as on a running portal's first minutes
        report = usage_rollup(until=now)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return {"nodes": nodes, "gpus": len(gpus), "jobs": len(jobs), "samples": n_samples, "rollups": n_rollups,
            "ledger_rows": UsageRecord.objects.count(), "now": now}


def best_ms(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return round(best * 1000, 1)


def measure(world: dict, repeat: int) -> dict:
    from django.contrib.auth import get_user_model
    from django.test import Client

    from accounting.selectors import usage_lines
    from portal.models import Team

    User = get_user_model()
    root, fin = User.objects.get(username="root"), User.objects.get(username="fin")
    member = User.objects.get(username="team-00-u0")
    now = world["now"]
    team = Team.objects.get(name="team-00")
    out = {
        "lines_30d_by_day": best_ms(lambda: usage_lines(root, start=now - timedelta(days=30), end=now, agg="day"),
                                    repeat),
        "lines_7d_by_hour": best_ms(lambda: usage_lines(root, start=now - timedelta(days=7), end=now, agg="hour"),
                                    repeat),
        "lines_1d_by_hour": best_ms(lambda: usage_lines(root, start=now - timedelta(days=1), end=now, agg="hour"),
                                    repeat),
        "lines_team_30d": best_ms(lambda: usage_lines(member, start=now - timedelta(days=30), end=now, agg="day",
                                                      team=team), repeat),
    }
    month = now.strftime("%Y-%m")
    for label, user, url in (
        ("page_admin", root, "/accounting/"),
        ("page_finance", fin, "/accounting/"),
        ("page_member", member, "/accounting/"),
        ("chargeback_csv", fin, f"/api/v1/reports/chargeback/?month={month}&format=csv"),
    ):
        client = Client()
        client.force_login(user)

        def get(client=client, url=url, label=label):
            response = client.get(url)
            if response.status_code != 200:
                raise SystemExit(f"{label}: {url} answered {response.status_code}")

        out[label] = best_ms(get, repeat)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/accounting.py", description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=20, help="8-GPU nodes")
    parser.add_argument("--days", type=int, default=30, help="days of finished work")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each measurement (the best is shown)")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--database", default="rota_bench_accounting")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.nodes < 1 or args.days < 2:
        parser.error("--nodes must be >= 1 and --days >= 2")
    base_url = os.environ.get("ROTA_BENCH_DATABASE_URL", "postgres://postgres@localhost:5432")
    os.environ["DATABASE_URL"] = setup_database(base_url, args.database)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.test.utils import setup_test_environment

    setup_test_environment()  # the test client's host is allowed
    call_command("migrate", verbosity=0)
    t0 = time.perf_counter()
    world = seed(args.nodes, args.days, args.seed)
    world["seed_s"] = round(time.perf_counter() - t0, 1)
    timings = measure(world, args.repeat)
    world["now"] = world["now"].isoformat()
    result = {**world, "ms": timings}
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        print(f"{world['ledger_rows']} ledger rows from {world['jobs']} jobs on {world['gpus']} GPUs over "
              f"{args.days} days; {world['samples']} raw samples (last 24 h), {world['rollups']} hourly rollups; "
              f"seeded in {world['seed_s']} s")
        for name, ms in timings.items():
            print(f"  {name:<18}{ms:10.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
