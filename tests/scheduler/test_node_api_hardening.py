"""The node API against a node that lies or errs: it speaks only for the attempt it holds (or held moments
ago), a finished job takes nothing more, register refuses other nodes' GPUs and garbage models and takes a
renumbered host, and telemetry out of any column's or clock's range is refused with the field named."""

from datetime import timedelta

import pytest
from django.db.models import F

from scheduler.cycle import run_cycle
from scheduler.models import Allocation, Gpu, GpuModel, GpuSample, Job, JobLog, Node
from scheduler.models.jobs import StopReason
from scheduler.services.common import db_now
from scheduler.services.jobs import job_submit
from scheduler.services.node_jobs import LATE_REPORT_WINDOW, nodes_check_liveness
from tests.factories import GpuFactory, NodeFactory

pytestmark = pytest.mark.django_db

H100_GPUS = [{"index": i, "uuid": f"GPU-h100-{i}", "model": "h100-80gb", "memory_mb": 81559} for i in range(4)]
REPORT = {"hostname": "node-h100", "gpu_backend": "fake", "cpus": 64, "memory_mb": 512000, "gpus": H100_GPUS}


def running_job(user, client):
    """A job admitted to node-h100 (the only h100 node) whose processes started there: attempt 1."""
    job = job_submit(user=user, name="j", command="python train.py", gpu_model="h100-80gb")
    run_cycle()
    assert event(client, job, 1, "started").status_code == 200
    job.refresh_from_db()
    assert job.state == "running"
    return job


def event(client, job, attempt, kind, **body):
    return client.post(f"/api/v1/node/jobs/{job.pk}/events/", {"attempt": attempt, "type": kind, **body},
                       format="json")


def log(client, job, attempt, offset, data):
    return client.post(f"/api/v1/node/jobs/{job.pk}/log/", {"attempt": attempt, "offset": offset, "data": data},
                       format="json")


def log_text(job, attempt):
    entry = JobLog.objects.filter(job=job, attempt=attempt).first()
    return entry.content if entry else ""


def age_allocations(job, by):
    Allocation.objects.filter(job=job, ended_at__isnull=False).update(
        started_at=F("started_at") - by, ended_at=F("ended_at") - by
    )


def unknown_job(job):
    return {"detail": f"job {job.pk} has no allocation on this node", "field": "job_id"}


# Speaking for attempts ----------------------------------------------------------------------------------


def test_a_node_cannot_write_into_nor_end_the_attempt_another_node_now_runs(alice, cluster, node_client):
    old = node_client(cluster["nodes"][0])
    job = running_job(alice, old)
    assert log(old, job, 1, 0, "epoch 1\n").status_code == 200
    Job.objects.filter(pk=job.pk).update(stop_reason=StopReason.PREEMPT)
    assert event(old, job, 1, "exited", signal=15).json()["state"] == "pending"
    second = NodeFactory(name="node-h100-b", pool=cluster["pool"])
    for i in range(4):
        GpuFactory(node=second, index=i, model=cluster["h100"], uuid=f"GPU-h100-b{i}")
    Node.objects.filter(pk=cluster["nodes"][0].pk).update(state=Node.DRAINING)
    run_cycle()
    new = node_client(second)
    assert event(new, job, 2, "started").json()["state"] == "running"
    assert log(new, job, 2, 0, "resumed\n").status_code == 200

    forged = log(old, job, 2, 8, "FORGED\n")
    assert forged.status_code == 404 and forged.json() == unknown_job(job)
    for kind in ("exited", "started", "stopped"):
        answer = event(old, job, 2, kind, exit_code=0)
        assert answer.status_code == 404 and answer.json() == unknown_job(job)
    job.refresh_from_db()
    assert job.state == "running" and job.attempt == 2
    assert Allocation.objects.filter(job=job, attempt=2, node=second, ended_at__isnull=True).count() == 1
    assert log_text(job, 2) == "resumed\n" and log_text(job, 1) == "epoch 1\n"


def test_a_node_marked_down_may_still_send_its_own_attempts_last_log_lines_for_a_while(alice, cluster,
                                                                                       node_client):
    client = node_client()
    job = running_job(alice, client)
    assert log(client, job, 1, 0, "one\n").status_code == 200
    Node.objects.filter(pk=cluster["nodes"][0].pk).update(last_heartbeat_at=db_now() - timedelta(hours=1))
    assert nodes_check_liveness() == ["node-h100"]
    job.refresh_from_db()
    assert job.state == "pending" and job.attempt == 2

    late = log(client, job, 1, 4, "two\n")  # the agent stopped the orphan and ships the rest of its log
    assert late.status_code == 200 and log_text(job, 1) == "one\ntwo\n"
    assert event(client, job, 1, "exited", exit_code=0).status_code == 409  # it was settled without it
    age_allocations(job, LATE_REPORT_WINDOW + timedelta(minutes=1))
    too_late = log(client, job, 1, 8, "three\n")
    assert too_late.status_code == 409 and too_late.json()["field"] == "attempt"
    assert log_text(job, 1) == "one\ntwo\n" and not JobLog.objects.filter(job=job, attempt=2).exists()


def test_a_finished_job_takes_no_more_log_and_once_over_no_more_events(alice, node_client):
    client = node_client()
    job = running_job(alice, client)
    assert log(client, job, 1, 0, "done\n").status_code == 200
    assert event(client, job, 1, "exited", exit_code=0).json()["state"] == "succeeded"
    transitions = list(job.transitions.values_list("to_state", flat=True))

    appended = log(client, job, 1, 5, "FORGED\n")
    assert appended.status_code == 409 and appended.json()["field"] == "attempt"
    resent = event(client, job, 1, "exited", exit_code=0)  # a resend of an event whose answer was lost
    assert resent.status_code == 200 and resent.json()["state"] == "succeeded"
    age_allocations(job, LATE_REPORT_WINDOW + timedelta(minutes=1))
    for kind, body in (("exited", {"exit_code": 1}), ("started", {}), ("start_failed", {"message": "x"})):
        answer = event(client, job, 1, kind, **body)
        assert answer.status_code == 409 and answer.json()["field"] == "attempt"
    job.refresh_from_db()
    assert job.state == "succeeded" and job.exit_code == 0 and log_text(job, 1) == "done\n"
    assert list(job.transitions.values_list("to_state", flat=True)) == transitions


# Register -----------------------------------------------------------------------------------------------


def test_register_refuses_a_gpu_uuid_another_node_holds_naming_it(cluster, node_client):
    gpus = [{**H100_GPUS[0], "uuid": "GPU-a100-0"}, *H100_GPUS[1:]]
    response = node_client().post("/api/v1/node/register/", {**REPORT, "gpus": gpus}, format="json")
    assert response.status_code == 400
    assert response.json()["field"] == "gpus" and "GPU-a100-0" in response.json()["detail"]
    assert Gpu.objects.get(uuid="GPU-a100-0").node == cluster["nodes"][1]
    assert Gpu.objects.get(node=cluster["nodes"][0], index=0).uuid == "GPU-h100-0"


def test_a_host_that_renumbered_its_gpus_registers_and_each_gpu_keeps_its_row(cluster, node_client):
    node = cluster["nodes"][0]
    rows = dict(Gpu.objects.filter(node=node).values_list("uuid", "pk"))
    Gpu.objects.filter(uuid="GPU-h100-0").update(healthy=False, health_reason="XID 79 on GPU 0")
    swapped = [{**H100_GPUS[i], "uuid": f"GPU-h100-{j}"} for i, j in enumerate((1, 0, 3, 2))]
    response = node_client().post("/api/v1/node/register/", {**REPORT, "gpus": swapped}, format="json")
    assert response.status_code == 200, response.json()
    after = {g.uuid: (g.pk, g.index, g.present) for g in Gpu.objects.filter(node=node)}
    assert after == {uuid: (rows[uuid], index, True) for uuid, index in
                     (("GPU-h100-0", 1), ("GPU-h100-1", 0), ("GPU-h100-2", 3), ("GPU-h100-3", 2))}
    assert Gpu.objects.get(uuid="GPU-h100-0").healthy is False  # the fault stays with the card
    node.refresh_from_db()
    assert node.state == Node.READY


def test_a_gpu_that_fell_off_the_bus_is_absent_while_the_others_move_up_and_returns_in_place(cluster,
                                                                                              node_client):
    node, client = cluster["nodes"][0], node_client()
    rows = dict(Gpu.objects.filter(node=node).values_list("uuid", "pk"))
    shifted = [{**H100_GPUS[0]}, {**H100_GPUS[1], "uuid": "GPU-h100-2"}, {**H100_GPUS[2], "uuid": "GPU-h100-3"}]
    assert client.post("/api/v1/node/register/", {**REPORT, "gpus": shifted}, format="json").status_code == 200
    gone = Gpu.objects.get(uuid="GPU-h100-1")
    assert gone.pk == rows["GPU-h100-1"] and not gone.present and gone.index >= 1024
    assert Gpu.objects.get(uuid="GPU-h100-2").index == 1 and Gpu.objects.get(uuid="GPU-h100-3").index == 2
    node.refresh_from_db()
    assert node.state == Node.DRAINING and "missing index [1]" in node.state_reason
    assert client.post("/api/v1/node/register/", REPORT, format="json").status_code == 200
    assert dict(Gpu.objects.filter(node=node, present=True).values_list("uuid", "index")) == {
        g["uuid"]: g["index"] for g in H100_GPUS}
    assert dict(Gpu.objects.filter(node=node).values_list("uuid", "pk")) == rows


@pytest.mark.parametrize("model", ["!!!", "gpu", "----", "<b>h100</b>", "h100 80gb; DROP", "x" * 70 + "1",
                                   "h100\u200b-80gb", "a100..40gb"])
def test_register_refuses_a_gpu_model_no_agent_would_report(cluster, node_client, model):
    models = set(GpuModel.objects.values_list("name", flat=True))
    gpus = [{**H100_GPUS[0], "model": model}, *H100_GPUS[1:]]
    response = node_client().post("/api/v1/node/register/", {**REPORT, "gpus": gpus}, format="json")
    assert response.status_code == 400
    assert "model" in response.json()["errors"]["gpus"]["0"]
    assert set(GpuModel.objects.values_list("name", flat=True)) == models


@pytest.mark.parametrize(("model", "slug"), [
    ("h100-80gb", "h100-80gb"),
    ("NVIDIA H100 80GB HBM3", "h100-80gb"),  # the driver's name, as the agent derives its slug from it
    ("a100-1g.10gb", "a100-1g.10gb"),  # a MIG profile
    ("NVIDIA A100-SXM4-80GB MIG 1g.10gb", "a100-1g.10gb"),
])
def test_register_takes_the_models_agents_report(cluster, node_client, model, slug):
    gpus = [{**g, "model": model} for g in H100_GPUS]
    response = node_client().post("/api/v1/node/register/", {**REPORT, "gpus": gpus}, format="json")
    assert response.status_code == 200, response.json()
    assert set(Gpu.objects.filter(node=cluster["nodes"][0]).values_list("model__name", flat=True)) == {slug}


# Telemetry ----------------------------------------------------------------------------------------------


def heartbeat(client, *rows):
    return client.post("/api/v1/node/heartbeat/", {"seq": 1, "telemetry": list(rows)}, format="json")


def sample(at, **values):
    return {"uuid": "GPU-h100-0", "at": at if isinstance(at, str) else at.isoformat(), "util_pct": 50.0, **values}


@pytest.mark.parametrize("ecc", [2**63, 10**30, 1e30])
def test_a_counter_beyond_its_column_is_refused_with_the_field_named(cluster, node_client, ecc):
    response = heartbeat(node_client(), sample(db_now(), ecc_uncorrected=ecc))
    assert response.status_code == 400
    assert "ecc_uncorrected" in response.json()["errors"]["telemetry"]["0"]
    assert not GpuSample.objects.exists()


@pytest.mark.parametrize("at", ["9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z"])
def test_a_sample_time_no_clock_shows_is_refused_with_the_field_named(cluster, node_client, at):
    response = heartbeat(node_client(), sample(at))
    assert response.status_code == 400
    assert response.json()["field"] == "telemetry" and "telemetry[0].at" in response.json()["detail"]
    assert not GpuSample.objects.exists() and Node.objects.get(name="node-h100").heartbeat_seq == 0


def test_a_batch_reaching_back_past_the_raw_retention_is_refused(cluster, node_client):
    now = db_now()
    response = heartbeat(node_client(), sample(now - timedelta(hours=25)), sample(now))
    assert response.status_code == 400
    assert response.json()["field"] == "telemetry" and "telemetry[0].at" in response.json()["detail"]
    assert not GpuSample.objects.exists()
