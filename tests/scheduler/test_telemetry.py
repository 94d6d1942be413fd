"""Telemetry and health from nodes: stored and attributed, refused whole when bad, faults drain the node,
exported at /metrics with dcgm-exporter names."""

from datetime import timedelta

import pytest
from django.test import Client

from scheduler.cycle import run_cycle
from scheduler.models import Gpu, GpuSample, GpuSampleRollup, Job, JobEvent, Node
from scheduler.services.common import db_now
from scheduler.services.jobs import job_submit
from scheduler.services.telemetry import telemetry_rollup

pytestmark = pytest.mark.django_db


def sample(uuid, at, **values):
    return {"uuid": uuid, "at": at.isoformat(), "util_pct": 50.0, "mem_used_mb": 1000.0, "temperature_c": 60,
            "power_w": 300.0, "sm_clock_mhz": 1800, "ecc_uncorrected": 0, "xid": None, **values}


def running_job(user):
    job = job_submit(user=user, name="t", command="true", gpu_model="h100-80gb")
    run_cycle()
    job.refresh_from_db()
    return job


def test_samples_are_stored_and_attributed_to_the_job_holding_the_gpu(alice, cluster, node_client):
    job = running_job(alice)
    gpu = job.allocations.get().gpu
    now = db_now()
    response = node_client().post("/api/v1/node/heartbeat/", {"seq": 1, "telemetry": [
        sample(gpu.uuid, now - timedelta(seconds=2), util_pct=97.0), sample("GPU-h100-3", now, util_pct=0.0),
    ]}, format="json")
    assert response.status_code == 200, response.json()
    held = GpuSample.objects.get(gpu=gpu)
    assert held.job_id == job.pk and held.util_pct == 97.0
    assert GpuSample.objects.get(gpu__uuid="GPU-h100-3").job_id is None
    gpu.refresh_from_db()
    assert gpu.util_pct == 97.0


def test_a_batch_naming_another_nodes_gpu_is_refused_whole(cluster, node_client):
    now = db_now()
    response = node_client().post("/api/v1/node/heartbeat/", {"seq": 1, "telemetry": [
        sample("GPU-h100-0", now), sample("GPU-a100-0", now),
    ]}, format="json")
    assert response.status_code == 400 and response.json()["field"] == "telemetry"
    assert not GpuSample.objects.exists()
    assert Node.objects.get(name="node-h100").heartbeat_seq == 0


def test_out_of_range_values_are_refused_with_the_field_named(cluster, node_client):
    response = node_client().post("/api/v1/node/heartbeat/", {"seq": 1, "telemetry": [
        sample("GPU-h100-0", db_now(), util_pct=250.0)]}, format="json")
    assert response.status_code == 400
    assert "telemetry" in response.json()["errors"]


def test_a_replayed_sample_is_not_stored_twice(cluster, node_client):
    client, now = node_client(), db_now()
    rows = [sample("GPU-h100-0", now)]
    client.post("/api/v1/node/heartbeat/", {"seq": 1, "telemetry": rows}, format="json")
    client.post("/api/v1/node/heartbeat/", {"seq": 2, "telemetry": rows}, format="json")
    assert GpuSample.objects.count() == 1


def test_a_skewed_node_clock_is_corrected_to_the_database_clock(cluster, node_client):
    now = db_now()
    node_client().post("/api/v1/node/heartbeat/", {"seq": 1, "telemetry": [
        sample("GPU-h100-0", now + timedelta(hours=3))]}, format="json")
    stored = GpuSample.objects.get().at
    assert abs((stored - now).total_seconds()) < 30


def test_a_critical_xid_marks_the_gpu_unhealthy_drains_the_node_and_requeues_its_job(alice, cluster, node_client):
    job = running_job(alice)
    gpu = job.allocations.get().gpu
    client = node_client()
    client.post(f"/api/v1/node/jobs/{job.pk}/events/", {"attempt": 1, "type": "started"}, format="json")
    response = client.post("/api/v1/node/heartbeat/", {"seq": 1, "gpus": [
        {"uuid": gpu.uuid, "healthy": False, "reason": "XID 79"}]}, format="json")
    gpu.refresh_from_db()
    node = Node.objects.get(name="node-h100")
    assert not gpu.healthy and gpu.health_reason == f"XID 79 on GPU {gpu.index}"
    assert node.state == Node.UNHEALTHY and node.state_reason == f"XID 79 on GPU {gpu.index}"
    [assignment] = response.json()["assignments"]
    assert assignment["desired"] == "stopped"
    client.post(f"/api/v1/node/jobs/{job.pk}/events/", {"attempt": 1, "type": "exited", "signal": 15},
                format="json")
    job.refresh_from_db()
    assert job.state == "pending" and job.attempt == 2
    run_cycle()
    job.refresh_from_db()
    assert job.state == "pending", "the only H100 node is unhealthy: nowhere to run"
    assert job.pending_reason_code, job.pending_reason_message
    assert not job.allocations.filter(attempt=2).exists()


def test_an_application_xid_is_a_job_event_and_leaves_the_gpu_healthy(alice, cluster, node_client):
    job = running_job(alice)
    gpu = job.allocations.get().gpu
    node_client().post("/api/v1/node/heartbeat/", {"seq": 1, "telemetry": [sample(gpu.uuid, db_now(), xid=13)]},
                       format="json")
    event = JobEvent.objects.get(job=job)
    assert event.kind == "xid" and "XID 13" in event.message
    gpu.refresh_from_db()
    assert gpu.healthy


def test_old_samples_roll_up_into_hourly_rows_once(cluster, node_client):
    gpu = Gpu.objects.get(uuid="GPU-h100-0")
    base = (db_now() - timedelta(days=2)).replace(minute=0, second=0, microsecond=0)
    node = gpu.node
    for minute, util in [(1, 10.0), (2, 30.0), (70, 90.0)]:
        GpuSample.objects.create(gpu=gpu, node=node, at=base + timedelta(minutes=minute), util_pct=util)
    made, deleted = telemetry_rollup(now=db_now())
    assert (made, deleted) == (2, 3)
    first = GpuSampleRollup.objects.get(hour=base)
    assert first.samples == 2 and first.util_avg == 20.0 and first.util_max == 30.0
    assert telemetry_rollup(now=db_now()) == (0, 0)


def test_metrics_export_dcgm_names_and_queue_gauges_to_admins_only(alice, cluster, node_client):
    running_job(alice)
    job_submit(user=alice, name="waits", command="true", gpu_model="h100-80gb", gpus=16)
    run_cycle()
    node_client().post("/api/v1/node/heartbeat/", {"seq": 1, "telemetry": [
        sample("GPU-h100-0", db_now(), util_pct=87.0)]}, format="json")
    anonymous = Client().get("/metrics")
    assert anonymous.status_code == 403
    admin = Client()
    alice.is_staff = True
    alice.save()
    admin.force_login(alice)
    body = admin.get("/metrics").content.decode()
    assert 'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-h100-0",modelName="h100-80gb",Hostname="node-h100"' in body
    assert 'rota_pending_jobs{team="vision"} 1' in body
    assert 'rota_admitted_jobs{team="vision"} 1' in body
    assert Job.objects.count() == 2


def test_resuming_a_node_acknowledges_the_fault_its_agent_still_reports(alice, cluster, node_client):
    """An admin resumes after fixing the GPU; the agent keeps reporting the old XID until it restarts. That
    report must not drain the node again, but a new fault, or the same one after a healthy report, does."""
    from scheduler.services.nodes import node_set_state

    client, node = node_client(), cluster["nodes"][0]
    sick = [{"uuid": "GPU-h100-3", "healthy": False, "reason": "XID 79"}]
    client.post("/api/v1/node/heartbeat/", {"seq": 1, "gpus": sick}, format="json")
    node_set_state(node=node, state=Node.READY, reason="GPU 3 reseated", user=alice)
    client.post("/api/v1/node/heartbeat/", {"seq": 2, "gpus": sick}, format="json")
    node.refresh_from_db()
    assert node.state == Node.READY and Gpu.objects.get(uuid="GPU-h100-3").healthy
    client.post("/api/v1/node/heartbeat/", {"seq": 3, "gpus": [
        {"uuid": "GPU-h100-3", "healthy": False, "reason": "XID 48"}]}, format="json")
    node.refresh_from_db()
    assert node.state == Node.UNHEALTHY and node.state_reason == "XID 48 on GPU 3"
    node_set_state(node=node, state=Node.READY, reason="replaced", user=alice)
    client.post("/api/v1/node/heartbeat/", {"seq": 4, "gpus": [{"uuid": "GPU-h100-3", "healthy": True}]},
                format="json")
    client.post("/api/v1/node/heartbeat/", {"seq": 5, "gpus": [
        {"uuid": "GPU-h100-3", "healthy": False, "reason": "XID 48"}]}, format="json")
    node.refresh_from_db()
    assert node.state == Node.UNHEALTHY, "the same fault after a healthy report is a new fault"


def test_a_stopped_scheduler_shows_in_the_metrics_and_on_every_page(alice, cluster):
    from datetime import timedelta

    from scheduler.models import SchedulerBeat
    from scheduler.services.node_jobs import nodes_check_liveness

    before = db_now()
    run_cycle()
    nodes_check_liveness()
    beats = dict(SchedulerBeat.objects.values_list("name", "at"))
    assert set(beats) == {"cycle", "liveness"} and all(at >= before for at in beats.values())
    admin, member = Client(), Client()
    alice.is_staff = True
    alice.save()
    admin.force_login(alice)
    body = admin.get("/metrics").content.decode()
    assert f'rota_scheduler_last_run_timestamp_seconds{{task="cycle"}} {beats["cycle"].timestamp():.3f}' in body
    assert "Scheduling has stopped" not in admin.get("/jobs/").content.decode()  # it just ran
    SchedulerBeat.objects.filter(name="cycle").update(at=db_now() - timedelta(minutes=4))  # the worker died
    page = admin.get("/jobs/").content.decode()
    assert "Scheduling has stopped: the last cycle ran 4 min ago" in page and "Celery worker" in page
    alice.is_staff = False
    alice.save()
    member.force_login(alice)
    page = member.get("/jobs/").content.decode()
    assert "Scheduling has stopped" in page and "nothing is lost" in page and "Celery" not in page
    run_cycle()  # it is back
    assert "Scheduling has stopped" not in member.get("/jobs/").content.decode()
