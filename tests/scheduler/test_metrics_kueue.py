"""Queue metrics under Kueue's names (scheduler.metrics_kueue) and the Grafana dashboard in deploy/ that reads
them beside the DCGM names."""

import json
import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.test import Client

from scheduler.cycle import run_cycle
from scheduler.metrics_kueue import WAIT_BUCKETS_S
from scheduler.models import Job, JobTransition
from scheduler.services.common import db_now
from scheduler.services.jobs import job_hold, job_submit

pytestmark = pytest.mark.django_db
DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "rota-dashboard.json"


def metrics(user) -> str:
    user.is_staff = True
    user.save()
    client = Client()
    client.force_login(user)
    response = client.get("/metrics")
    assert response.status_code == 200
    return response.content.decode()


def test_waiting_admitted_and_wait_time_per_team_and_gpu_model(alice, cluster):
    started = job_submit(user=alice, name="fits", command="true", gpu_model="h100-80gb")
    # The job entered the queue 90 s before the cycle that admits it: its wait lands in the 300 s bucket.
    JobTransition.objects.filter(job=started, to_state="pending").update(at=db_now() - timedelta(seconds=90))
    run_cycle()
    job_submit(user=alice, name="too big", command="true", gpu_model="h100-80gb", gpus=64)
    held = job_submit(user=alice, name="held", command="true", gpu_model="h100-80gb", gpus=64)
    job_hold(user=alice, job=held)
    run_cycle()
    body = metrics(alice)
    queue = 'cluster_queue="vision/h100-80gb"'
    assert f'kueue_pending_workloads{{{queue},status="active"}} 1' in body
    assert f'kueue_pending_workloads{{{queue},status="inadmissible"}} 1' in body
    assert f"kueue_admitted_workloads_total{{{queue}}} 1" in body
    for bound in WAIT_BUCKETS_S:
        assert f'kueue_admission_wait_time_seconds_bucket{{{queue},le="{bound:g}"}} {1 if bound >= 90 else 0}' in body
    assert f'kueue_admission_wait_time_seconds_bucket{{{queue},le="+Inf"}} 1' in body
    waited = float(re.search(rf"kueue_admission_wait_time_seconds_sum{{{queue}}} (\S+)", body).group(1))
    assert 90 <= waited < 120
    assert f"kueue_admission_wait_time_seconds_count{{{queue}}} 1" in body
    assert Job.objects.count() == 3


def test_a_requeued_attempt_admitted_again_counts_again(alice, cluster):
    from django.db import transaction

    from scheduler.services.node_jobs import _lose_node

    job = job_submit(user=alice, name="twice", command="true", gpu_model="a100-40gb")
    run_cycle()
    job.refresh_from_db()
    node = job.allocations.get().node
    with transaction.atomic():  # the node went silent: the attempt is requeued, as the liveness check does
        _lose_node(job, node, db_now())
    job.refresh_from_db()
    assert job.state == "pending" and job.attempt == 2
    run_cycle()
    body = metrics(alice)
    assert 'kueue_admitted_workloads_total{cluster_queue="vision/a100-40gb"} 2' in body
    assert 'kueue_admission_wait_time_seconds_count{cluster_queue="vision/a100-40gb"} 2' in body


def test_a_scrape_reads_the_tallies_not_the_transitions(alice, cluster):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for i in range(3):
        job_submit(user=alice, name=f"j{i}", command="true", gpu_model="h100-80gb")
        run_cycle()
    with CaptureQueriesContext(connection) as queries:
        body = metrics(alice)
    assert 'kueue_admitted_workloads_total{cluster_queue="vision/h100-80gb"} 3' in body
    assert not [q["sql"] for q in queries if "scheduler_jobtransition" in q["sql"]]


def test_the_grafana_dashboard_reads_only_metrics_rota_exports(alice, cluster):
    board = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p["targets"]]
    used = {name for e in exprs for name in re.findall(r"\b((?:kueue|rota|DCGM)_[A-Za-z0-9_]+)", e)}
    assert {"kueue_pending_workloads", "kueue_admitted_workloads_total", "DCGM_FI_DEV_GPU_UTIL"} <= used
    job_submit(user=alice, name="fits", command="true", gpu_model="h100-80gb")
    run_cycle()
    body = metrics(alice)
    exported = set(re.findall(r"^# TYPE (\S+) ", body, re.M))
    histograms = {f"{n}_bucket" for n in exported} | {f"{n}_sum" for n in exported} | {f"{n}_count" for n in exported}
    assert not used - exported - histograms, f"the dashboard reads metrics Rota does not export: {used - exported}"


# The wait histogram as first written: a window over every transition ever recorded. The bounded query must
# answer exactly as it did.
REFERENCE_WAIT_SQL = """
    WITH waits AS (
        SELECT job_id, to_state, EXTRACT(EPOCH FROM at - LAG(at) OVER (PARTITION BY job_id ORDER BY at, id)) AS wait
        FROM scheduler_jobtransition)
    SELECT t.name, m.name, {buckets}, count(*), COALESCE(sum(wait), 0)
    FROM waits w JOIN scheduler_job j ON j.id = w.job_id JOIN portal_team t ON t.id = j.team_id
    LEFT JOIN scheduler_gpumodel m ON m.id = j.gpu_model_id
    WHERE w.to_state = 'admitted' AND w.wait IS NOT NULL
    GROUP BY t.name, m.name ORDER BY t.name, m.name"""


def _tallied() -> list[tuple]:
    from scheduler.metrics_kueue import _tallies

    return [(team, model, *buckets, n, pytest.approx(total)) for team, model, n, total, *buckets in _tallies()]


def test_the_tallies_and_their_backfill_answer_as_the_full_scan_of_the_history_does(alice, charlie, cluster):
    """Random histories (ties in ``at``, admissions twice in a row, after requeues): adding each admission as
    the cycle does, and the migration's one-off count of the admissions made before the tally existed, both
    equal a window over every transition ever recorded."""
    import importlib
    import random

    from django.db import connection

    from scheduler.metrics_kueue import admissions_tally
    from scheduler.models import AdmissionTally

    rng = random.Random(7)
    jobs = [job_submit(user=user, name=f"j{i}", command="true", gpu_model=model)
            for i, (user, model) in enumerate([(alice, "h100-80gb"), (alice, "a100-40gb"), (charlie, "h100-80gb"),
                                               (alice, None), (charlie, "a100-40gb")] * 3)]
    JobTransition.objects.all().delete()
    AdmissionTally.objects.all().delete()
    for job in jobs:
        at = job.created_at
        for step in range(rng.randint(0, 7)):
            at += timedelta(seconds=rng.choice([0, 0, 1, 4, 30, 200, 5000, 90000]))
            state = rng.choice(["pending", "admitted", "admitted", "starting", "running", "pending"])
            JobTransition.objects.create(job=job, from_state="", to_state=state, at=at, cause=f"step {step}")
    buckets = ", ".join(f"count(*) FILTER (WHERE wait <= {b})" for b in WAIT_BUCKETS_S)
    with connection.cursor() as cursor:
        cursor.execute(REFERENCE_WAIT_SQL.format(buckets=buckets))
        reference = cursor.fetchall()
    assert reference and len(reference) >= 4

    admissions: dict = {}
    for job_id, at in JobTransition.objects.filter(to_state="admitted").values_list("job_id", "at"):
        admissions.setdefault(at, set()).add(job_id)
    for at, job_ids in admissions.items():
        admissions_tally(sorted(job_ids), at)
    assert _tallied() == reference

    AdmissionTally.objects.all().delete()
    migration = importlib.import_module("scheduler.migrations.0021_admission_tally")
    with connection.cursor() as cursor:
        cursor.execute(migration.BACKFILL)
    assert _tallied() == reference


def test_a_cycles_tally_reaches_its_admissions_and_their_predecessors_through_indexes(cluster):
    from django.db import connection, transaction

    from scheduler.metrics_kueue import _wait_sql

    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # the plan a large table gets, on an empty one
        cursor.execute("EXPLAIN " + _wait_sql(), {"admitted": "admitted", "at": db_now(), "jobs": [1, 2]})
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "transition_job_at_idx" in plan and "Seq Scan on scheduler_jobtransition" not in plan, plan
