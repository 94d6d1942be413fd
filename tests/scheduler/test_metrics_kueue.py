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
    run_cycle()
    # The admission is dated 90 s after the job entered the queue: its wait lands in the 300 s bucket.
    admitted = JobTransition.objects.get(job=started, to_state="admitted")
    queued = JobTransition.objects.get(job=started, to_state="pending")
    JobTransition.objects.filter(pk=admitted.pk).update(at=queued.at + timedelta(seconds=90))
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
    assert f"kueue_admission_wait_time_seconds_sum{{{queue}}} 90" in body
    assert f"kueue_admission_wait_time_seconds_count{{{queue}}} 1" in body
    assert Job.objects.count() == 3


def test_a_requeued_attempt_admitted_again_counts_again(alice, cluster):
    job = job_submit(user=alice, name="twice", command="true", gpu_model="a100-40gb")
    run_cycle()
    job.refresh_from_db()
    # A second admission of the same job, as after a preemption's requeue.
    JobTransition.objects.create(job=job, from_state="running", to_state="pending", at=job.created_at
                                 + timedelta(seconds=10), cause="preempted: requeued")
    JobTransition.objects.create(job=job, from_state="pending", to_state="admitted", at=job.created_at
                                 + timedelta(seconds=13), cause="admitted")
    body = metrics(alice)
    assert 'kueue_admitted_workloads_total{cluster_queue="vision/a100-40gb"} 2' in body
    assert 'kueue_admission_wait_time_seconds_count{cluster_queue="vision/a100-40gb"} 2' in body


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
