"""A service's health as its node reports it: kept on the job from the heartbeat (only for jobs running on
that node), routed around by the gateway, and an attempt the node stopped as unhealthy is restarted with the
probe's message as its cause."""

import pytest

from scheduler.cycle import run_cycle
from scheduler.gateway import replicas
from scheduler.models import Job, JobEvent, JobTransition
from scheduler.services.jobs import job_submit

pytestmark = pytest.mark.django_db


def started_replica(user, client, name="llm-1", health_path="/health") -> Job:
    """A replica started on node-h100; its agent probes it when it has a health path (``health`` starting)."""
    job = job_submit(user=user, name=name, kind="inference", command="serve", gpu_model="h100-80gb",
                     env={"ROTA_HEALTH_PATH": health_path} if health_path else {})
    run_cycle()
    job.refresh_from_db()
    event = {"attempt": 1, "type": "started", "address": f"127.0.0.1:{job.service_port}",
             **({"health": "starting"} if health_path else {})}
    answer = client.post(f"/api/v1/node/jobs/{job.pk}/events/", event, format="json")
    assert answer.status_code == 200, answer.json()
    job.refresh_from_db()
    return job


def beat(client, seq, *running):
    answer = client.post("/api/v1/node/heartbeat/", {"seq": seq, "running": list(running)}, format="json")
    assert answer.status_code == 200, answer.json()


def entry(job, health, message=""):
    return {"job_id": job.pk, "attempt": job.attempt, "pid": 1, "state": "running", "health": health,
            "health_message": message}


def test_a_probed_replica_gets_traffic_only_once_its_node_reports_it_healthy(alice, cluster, node_client):
    client = node_client()
    probed = started_replica(alice, client)
    plain = started_replica(alice, client, name="llm-2", health_path="")
    assert (probed.service_health, plain.service_health) == ("starting", "")
    assert [j.pk for j in replicas(cluster["vision"], "llm")] == [plain.pk]
    beat(client, 1, entry(probed, "healthy"))
    assert {j.pk for j in replicas(cluster["vision"], "llm")} == {probed.pk, plain.pk}
    beat(client, 2, entry(probed, "unhealthy", "health probe GET /health failed: answered HTTP 503"))
    probed.refresh_from_db()
    assert probed.service_health == "unhealthy" and "HTTP 503" in probed.service_health_message
    assert [j.pk for j in replicas(cluster["vision"], "llm")] == [plain.pk]
    beat(client, 3, entry(probed, "unhealthy", "health probe GET /health failed: answered HTTP 503"))
    assert JobEvent.objects.filter(job=probed, kind="unhealthy").count() == 1


def test_a_replica_started_by_an_agent_that_does_not_probe_gets_traffic_as_before(alice, cluster, node_client):
    client = node_client()
    job = job_submit(user=alice, name="llm", kind="inference", command="serve", gpu_model="h100-80gb",
                     env={"ROTA_HEALTH_PATH": "/health"})
    run_cycle()
    job.refresh_from_db()
    client.post(f"/api/v1/node/jobs/{job.pk}/events/",
                {"attempt": 1, "type": "started", "address": f"127.0.0.1:{job.service_port}"}, format="json")
    assert [j.pk for j in replicas(cluster["vision"], "llm")] == [job.pk]
    bad = client.post(f"/api/v1/node/jobs/{job.pk}/events/", {"attempt": 1, "type": "started", "health": "great"},
                      format="json")
    assert bad.status_code == 400 and "health" in bad.json()["errors"]


def test_a_node_cannot_report_the_health_of_a_job_it_does_not_run(alice, cluster, node_client):
    job = started_replica(alice, node_client())
    beat(node_client(cluster["nodes"][1]), 1, entry(job, "healthy"))
    job.refresh_from_db()
    assert job.service_health == "starting"
    bad = node_client().post("/api/v1/node/heartbeat/", {"seq": 5, "running": [entry(job, "great")]},
                             format="json")
    assert bad.status_code == 400 and "running" in bad.json()["errors"]


def test_an_attempt_stopped_as_unhealthy_is_restarted_with_the_probes_message_as_its_cause(alice, node_client):
    client = node_client()
    job = started_replica(alice, client)
    message = "health probe GET /health failed: timed out (3 times in a row)"
    answer = client.post(f"/api/v1/node/jobs/{job.pk}/events/",
                         {"attempt": 1, "type": "exited", "exit_code": 0, "reason": "Unhealthy", "message": message},
                         format="json")
    assert answer.status_code == 200, answer.json()
    job.refresh_from_db()
    assert (job.state, job.attempt, job.restarts) == ("pending", 2, 1)
    cause = JobTransition.objects.filter(job=job).order_by("-id").first().cause
    assert cause.startswith(f"service Unhealthy: {message}: restarting in")
