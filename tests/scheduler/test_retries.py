"""Retries: an attempt that ended badly is queued again as a new attempt (after a doubling backoff) when the
job asks for that kind of end, a lost node's job is retried up to the platform's limit, and every attempt
stays visible with its cause, its own allocations and its own GPU-seconds."""

from datetime import timedelta

import pytest

from scheduler.cycle import run_cycle
from scheduler.models import Job, Node
from scheduler.retries import FAILED, NODE_LOST, TIMED_OUT, RetryPolicy, retry_delay
from scheduler.services.common import db_now
from scheduler.services.jobs import job_submit
from scheduler.services.node_jobs import nodes_check_liveness
from tests.factories import GpuFactory, NodeFactory

pytestmark = pytest.mark.django_db

JOB = {"name": "train", "command": "python train.py", "gpu_model": "h100-80gb"}


def policy(max_retries=0, retry_on=(), backoff_s=30, platform_retries=3):
    return RetryPolicy(max_retries, tuple(retry_on), backoff_s, platform_retries)


@pytest.mark.parametrize("rule, kind, retries, delay", [
    (policy(), FAILED, 0, None),  # a user failure is retried only when asked
    (policy(2, [FAILED]), FAILED, 0, 30),
    (policy(2, [FAILED]), FAILED, 1, 60),
    (policy(2, [FAILED]), FAILED, 2, None),
    (policy(2, [FAILED]), TIMED_OUT, 0, None),
    (policy(10, [TIMED_OUT], backoff_s=1000), TIMED_OUT, 3, 3600),  # capped at an hour
    (policy(), NODE_LOST, 0, 0),  # the platform's own: at once,
    (policy(), NODE_LOST, 2, 60),  # then backing off,
    (policy(), NODE_LOST, 3, None),  # up to its limit
    (policy(0, [NODE_LOST]), NODE_LOST, 0, None),  # a job may refuse them
    (policy(5, [NODE_LOST], backoff_s=5), NODE_LOST, 4, 80),  # or ask for more
])
def test_the_retry_rule(rule, kind, retries, delay):
    assert retry_delay(rule, kind, retries) == delay


def node_event(client, job, type_, **event):
    job.refresh_from_db()
    response = client.post(f"/api/v1/node/jobs/{job.pk}/events/", {"attempt": job.attempt, "type": type_, **event},
                           format="json")
    assert response.status_code == 200, response.json()
    job.refresh_from_db()
    return job


def admitted(job):
    Job.objects.filter(pk=job.pk).update(not_before=db_now() - timedelta(seconds=1))  # its backoff is over
    run_cycle()
    job.refresh_from_db()
    assert job.state == "admitted", job.pending_reason_message
    return job


def test_a_failing_job_is_retried_with_a_doubling_backoff_then_fails(alice, api, node_client):
    client = node_client()
    resp = api(alice).post("/api/v1/jobs/", {**JOB, "max_retries": 2, "retry_on": ["failed"], "retry_backoff_s": 10},
                           format="json")
    assert resp.status_code == 201 and resp.json()["retry_on"] == ["failed"]
    job = admitted(Job.objects.get(pk=resp.json()["id"]))
    waits = []
    for attempt in (1, 2):
        node_event(client, job, "started")
        job = node_event(client, job, "exited", exit_code=1)
        assert (job.state, job.attempt, job.retries, job.pending_reason_code) == ("pending", attempt + 1, attempt,
                                                                                  "Backoff")
        waits.append((job.not_before - job.transitions.last().at).total_seconds())
        run_cycle()
        job.refresh_from_db()
        assert job.state == "pending", "still backing off"
        job = admitted(job)
    assert waits == [10, 20]
    node_event(client, job, "started")
    job = node_event(client, job, "exited", exit_code=1)
    assert job.state == "failed" and job.failure_class == "user"
    body = api(alice).get(f"/api/v1/jobs/{job.pk}/").json()
    attempts = body["attempts"]
    assert [a["attempt"] for a in attempts] == [1, 2, 3]
    assert attempts[0]["ended"] == "exited with code 1: retry 1 of 2 in 10 s" and attempts[0]["exit_code"] == 1
    assert attempts[2]["ended"] == "exited with code 1"
    assert all(a["nodes"] == ["node-h100"] and a["ended_at"] for a in attempts)
    # Accounting is per attempt as before: each attempt's allocations carry its number.
    assert sorted(job.allocations.values_list("attempt", flat=True)) == [1, 2, 3]


def test_a_job_that_asks_for_nothing_fails_at_once(alice, node_client):
    client = node_client()
    job = admitted(job_submit(user=alice, **JOB))
    node_event(client, job, "started")
    job = node_event(client, job, "exited", exit_code=2)
    assert (job.state, job.attempt, job.retries) == ("failed", 1, 0)


def test_a_time_limit_is_retried_only_when_asked(alice, node_client):
    client = node_client()
    job = admitted(job_submit(user=alice, max_retries=1, retry_on=["timed-out"], **JOB))
    node_event(client, job, "started")
    job = node_event(client, job, "stopped", signal=15, message="time limit reached")
    assert (job.state, job.attempt) == ("pending", 2)
    job = admitted(job)
    node_event(client, job, "started")
    job = node_event(client, job, "stopped", signal=15, message="time limit reached")
    assert job.state == "timed-out"


def test_a_job_on_a_node_that_loses_a_gpu_is_retried_elsewhere_and_succeeds(alice, cluster, node_client):
    spare = NodeFactory(name="node-h100-b", pool=cluster["pool"])
    for i in range(4):
        GpuFactory(node=spare, index=i, model=cluster["h100"], uuid=f"GPU-h100-b{i}")
    first = cluster["nodes"][0]
    job = admitted(job_submit(user=alice, **JOB))
    on = job.allocations.get().node
    client = node_client(on)
    gpu = job.allocations.get().gpu
    node_event(client, job, "started")
    client.post("/api/v1/node/heartbeat/", {"seq": 1, "gpus": [{"uuid": gpu.uuid, "healthy": False,
                                                                "reason": "XID 79"}]}, format="json")
    job = node_event(client, job, "exited", signal=15)
    assert (job.state, job.attempt, job.pending_reason_code) == ("pending", 2, "Requeued")
    assert job.transitions.last().cause == "node unhealthy: retry 1 of 3 at once"
    run_cycle()
    job.refresh_from_db()
    assert job.state == "admitted"
    second = job.allocations.get(attempt=2).node
    assert second != on and on in (first, spare)
    other = node_client(second)
    node_event(other, job, "started")
    job = node_event(other, job, "exited", exit_code=0)
    assert job.state == "succeeded" and job.attempt == 2


def test_a_job_whose_nodes_keep_getting_lost_ends_node_lost(alice, cluster, settings):
    settings.ROTA_PLATFORM_RETRIES = 1
    node = cluster["nodes"][0]
    job = admitted(job_submit(user=alice, **JOB))
    for expected in ("pending", "node-lost"):
        Node.objects.filter(pk=node.pk).update(state=Node.READY, last_heartbeat_at=db_now() - timedelta(hours=1))
        assert nodes_check_liveness() == ["node-h100"]
        job.refresh_from_db()
        assert job.state == expected, job.transitions.last().cause
        if expected == "pending":
            Node.objects.filter(pk=node.pk).update(state=Node.READY, last_heartbeat_at=db_now())
            job = admitted(job)
    assert job.failure_class == "platform" and job.finished_at is not None
    assert job.transitions.last().cause == "node node-h100 stopped answering: no retries left (1 used)"


@pytest.mark.parametrize("body, field, says", [
    ({"max_retries": 11, "retry_on": ["failed"]}, "max_retries", "less than or equal to 10"),
    ({"retry_on": ["bogus"]}, "retry_on", "not a valid choice"),
    ({"max_retries": 2}, "retry_on", "name the ends to retry"),
    ({"retry_on": ["failed", "failed"], "max_retries": 1}, "retry_on", "distinct"),
    ({"retry_backoff_s": 3601, "max_retries": 1, "retry_on": ["failed"]}, "retry_backoff_s", "3600"),
])
def test_a_bad_retry_policy_is_refused_naming_the_field(alice, api, body, field, says):
    resp = api(alice).post("/api/v1/jobs/", {**JOB, **body}, format="json")
    assert resp.status_code == 400 and says in str(resp.json()["errors"][field])
    assert not Job.objects.exists()


def test_the_submit_form_takes_a_retry_policy_and_the_page_shows_each_attempt(alice, client, node_client):
    client.force_login(alice)
    response = client.post("/jobs/new/", {"team": "vision", "kind": "training", "gpus": 1, "max_retries": 1,
                                          "retry_on": ["failed", "node-lost"], "retry_backoff_s": 5, **JOB})
    job = Job.objects.get()
    assert response.status_code == 302
    assert (job.max_retries, job.retry_on, job.retry_backoff_s) == (1, ["failed", "node-lost"], 5)
    node = node_client()
    job = admitted(job)
    node_event(node, job, "started")
    node_event(node, job, "exited", exit_code=7)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "Attempts" in page and "exited with code 7: retry 1 of 1 in 5 s" in page and "(exit 7)" in page
