"""Kind-specific lifecycles on the portal side: inference restarts with backoff, notebooks get a port and
are reclaimed when idle, time limits are enforced as a backstop, an agent-stopped job is requeued."""

from datetime import timedelta

import pytest

from scheduler.cycle import run_cycle
from scheduler.models import GpuSample, Job
from scheduler.services.common import db_now
from scheduler.services.jobs import job_submit

pytestmark = pytest.mark.django_db


def started(user, client, **kw):
    job = job_submit(user=user, name=kw.pop("name", "svc"), command="serve", gpu_model="h100-80gb", **kw)
    run_cycle()
    job.refresh_from_db()
    assert job.state == "admitted", job.pending_reason_message
    client.post(f"/api/v1/node/jobs/{job.pk}/events/", {"attempt": job.attempt, "type": "started"}, format="json")
    job.refresh_from_db()
    return job


def end(client, job, **event):
    client.post(f"/api/v1/node/jobs/{job.pk}/events/", {"attempt": job.attempt, "type": "exited", **event},
                format="json")
    job.refresh_from_db()
    return job


def test_a_failed_inference_service_is_restarted_after_a_growing_backoff(alice, node_client, api):
    client = node_client()
    job = started(alice, client, kind="inference")
    job = end(client, job, exit_code=1)
    assert job.state == "pending" and job.attempt == 2 and job.restarts == 1
    assert api(alice).get(f"/api/v1/jobs/{job.pk}/").json()["restarts"] == 1  # the API and CLI show it too
    assert job.pending_reason_code == "Backoff"
    first_wait = (job.not_before - job.transitions.last().at).total_seconds()
    run_cycle()
    job.refresh_from_db()
    assert job.state == "pending", "still backing off"
    Job.objects.filter(pk=job.pk).update(not_before=db_now() - timedelta(seconds=1))
    run_cycle()
    job.refresh_from_db()
    assert job.state == "admitted"
    client.post(f"/api/v1/node/jobs/{job.pk}/events/", {"attempt": 2, "type": "started"}, format="json")
    job = end(client, job, exit_code=1)
    second_wait = (job.not_before - job.transitions.last().at).total_seconds()
    assert second_wait == 2 * first_wait


def test_a_service_that_stayed_up_backs_off_from_the_start_again(alice, node_client):
    client = node_client()
    job = started(alice, client, kind="inference")
    Job.objects.filter(pk=job.pk).update(restarts=4)  # it crash-looped earlier, then recovered
    Job.objects.filter(pk=job.pk).update(started_at=db_now() - timedelta(minutes=30))
    job = end(client, job, exit_code=1)
    assert job.restarts == 1 and (job.not_before - job.transitions.last().at).total_seconds() == 10
    Job.objects.filter(pk=job.pk).update(not_before=db_now() - timedelta(seconds=1))
    run_cycle()
    job.refresh_from_db()
    client.post(f"/api/v1/node/jobs/{job.pk}/events/", {"attempt": job.attempt, "type": "started"}, format="json")
    job = end(client, job, exit_code=1)  # down again at once: the count goes on
    assert job.restarts == 2 and (job.not_before - job.transitions.last().at).total_seconds() == 20


def test_a_crash_looping_service_waits_for_free_gpus_instead_of_preempting(alice, charlie, cluster, node_client):
    """nlp's training fills the node; vision's production service preempts it once, not on every restart."""
    from scheduler.models import Allocation

    client = node_client()
    fill = [started(charlie, client, gpus=1, priority_class="batch") for _ in range(2)]
    fill += [started(alice, client, gpus=1, priority_class="batch") for _ in range(2)]
    svc = job_submit(user=alice, name="svc", command="serve", gpu_model="h100-80gb", kind="inference")
    run_cycle()
    assert Job.objects.filter(pk__in=[j.pk for j in fill], stop_reason="preempt").count() == 1  # first start
    Job.objects.filter(pk=svc.pk).update(restarts=2, not_before=None)  # now two quick failures in a row
    for job in fill:  # let the victim go and come back: the node is full again
        Job.objects.filter(pk=job.pk).update(stop_reason="")
    Allocation.objects.filter(job=svc).update(ended_at=db_now())
    Job.objects.filter(pk=svc.pk).update(state="pending", attempt=5)
    run_cycle()
    svc.refresh_from_db()
    assert svc.state == "pending" and svc.pending_reason_code != "Preempting"
    assert not Job.objects.filter(pk__in=[j.pk for j in fill], stop_reason="preempt").exists()


def test_a_training_job_that_fails_is_not_restarted(alice, node_client):
    client = node_client()
    job = end(client, started(alice, client), exit_code=1)
    assert job.state == "failed"


def test_a_notebook_gets_a_port_its_env_carries_and_a_connect_url(alice, node_client, api):
    client = node_client()
    job = started(alice, client, kind="notebook")
    assert job.service_port == 30000
    [assignment] = client.post("/api/v1/node/heartbeat/", {"seq": 1}, format="json").json()["assignments"]
    assert assignment["env"]["ROTA_PORT"] == "30000" and assignment["port"] == 30000
    assert job.connect_url == f"/notebooks/{job.pk}/"  # through the portal's proxy (scheduler.notebooks)
    [listed] = api(alice).get("/api/v1/jobs/", {"state": "active"}).json()["results"]
    assert listed["connect_url"] == listed["notebook_url"] == f"/notebooks/{job.pk}/"
    second = started(alice, client, kind="notebook")
    assert second.service_port == 30001


def test_service_ports_come_from_the_sites_range(alice, node_client, settings):
    settings.ROTA_SERVICE_PORTS = (40000, 40001)
    client = node_client()
    assert [started(alice, client, kind="notebook").service_port for _ in range(2)] == [40000, 40001]


def test_an_inference_replicas_connect_url_is_its_services_gateway(alice, node_client, api):
    client = node_client()
    job = started(alice, client, kind="inference", name="llm-2")
    assert job.connect_url == "/serve/vision/llm/"  # with a key of the service, never the node's own port
    [listed] = api(alice).get("/api/v1/jobs/", {"state": "active"}).json()["results"]
    assert listed["connect_url"] == "/serve/vision/llm/"


def test_an_idle_notebook_is_reclaimed_but_a_busy_one_is_not(alice, cluster, node_client):
    client = node_client()
    idle = started(alice, client, kind="notebook", idle_timeout_minutes=10)
    busy = started(alice, client, kind="notebook", idle_timeout_minutes=10)
    now = db_now()
    Job.objects.filter(pk__in=[idle.pk, busy.pk]).update(started_at=now - timedelta(minutes=30))
    for job, util in [(idle, 1.0), (busy, 60.0)]:
        alloc = job.allocations.get()
        for minute in range(0, 12, 2):
            GpuSample.objects.create(gpu=alloc.gpu, node=alloc.node, job=job, at=now - timedelta(minutes=minute),
                                     util_pct=util)
    report = run_cycle()
    assert report.reclaimed == 1
    idle.refresh_from_db()
    busy.refresh_from_db()
    assert idle.stop_reason == "idle" and busy.stop_reason == ""
    idle = end(client, idle, signal=15)
    assert idle.state == "cancelled" and "idle" in idle.transitions.last().cause


def test_a_notebook_without_telemetry_is_not_judged_idle(alice, node_client):
    client = node_client()
    job = started(alice, client, kind="notebook", idle_timeout_minutes=10)
    Job.objects.filter(pk=job.pk).update(started_at=db_now() - timedelta(hours=1))
    assert run_cycle().reclaimed == 0


def test_a_job_past_its_time_limit_is_asked_to_stop_and_ends_timed_out(alice, node_client):
    client = node_client()
    job = started(alice, client, time_limit_minutes=5)
    Job.objects.filter(pk=job.pk).update(started_at=db_now() - timedelta(minutes=6))
    assert run_cycle().timed_out == 1
    job = end(client, job, signal=15)
    assert job.state == "timed-out"


def test_a_job_the_agent_stopped_on_its_own_is_requeued(alice, node_client):
    client = node_client()
    job = started(alice, client)
    client.post(f"/api/v1/node/jobs/{job.pk}/events/", {"attempt": 1, "type": "stopped", "signal": 15,
                                                         "message": "agent shutting down"}, format="json")
    job.refresh_from_db()
    assert job.state == "pending" and job.attempt == 2
    assert "agent shutting down" in job.pending_reason_message
