"""``POST /api/v1/node/events/``: a node's job events in one request, each judged as the single-event endpoint
judges it, in order, and the cycle woken once for the batch."""

import json
from datetime import timedelta

import pytest
import redis
from django.conf import settings

from scheduler import wake
from scheduler.cycle import run_cycle
from scheduler.models import Allocation, Job
from scheduler.services.jobs import job_submit

pytestmark = pytest.mark.django_db
URL = "/api/v1/node/events/"


@pytest.fixture
def queue():
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete(wake.CYCLE_WANTED, "celery")
    yield client
    client.delete(wake.CYCLE_WANTED, "celery")


def cycles_asked(queue) -> int:
    """Scheduling cycles asked of Celery (the queue holds the notifications' tasks too)."""
    return sum(json.loads(message)["headers"]["task"] == "scheduler.cycle" for message in queue.lrange("celery", 0, -1))


def admitted(user, n):
    jobs = [job_submit(user=user, name=f"j{i}", command="true", gpu_model="h100-80gb") for i in range(n)]
    run_cycle()
    assert {job.state for job in Job.objects.filter(pk__in=[j.pk for j in jobs])} == {"admitted"}
    return jobs


def test_starts_and_exits_of_several_jobs_go_in_one_request_and_wake_the_cycle_once(
        alice, node_client, queue, django_capture_on_commit_callbacks):
    client = node_client()
    a, b, c = admitted(alice, 3)
    started = [{"job_id": j.pk, "attempt": 1, "type": "started", "pid": 40 + i} for i, j in enumerate((a, b, c))]
    queue.delete(wake.CYCLE_WANTED, "celery")  # the submits' own wake-ups
    with django_capture_on_commit_callbacks(execute=True):
        answer = client.post(URL, {"events": started}, format="json")
    assert answer.status_code == 200, answer.json()
    assert answer.json()["results"] == [{"job_id": j.pk, "state": "running"} for j in (a, b, c)]
    assert cycles_asked(queue) == 0  # starts free nothing
    ends = [{"job_id": a.pk, "attempt": 1, "type": "exited", "exit_code": 0},
            {"job_id": b.pk, "attempt": 1, "type": "exited", "exit_code": 3}]
    with django_capture_on_commit_callbacks(execute=True):
        answer = client.post(URL, {"events": ends}, format="json")
    assert answer.json()["results"] == [{"job_id": a.pk, "state": "succeeded"}, {"job_id": b.pk, "state": "failed"}]
    assert cycles_asked(queue) == 1 and wake.cycle_requested()  # one wake-up for the two ends
    assert set(Allocation.objects.filter(ended_at__isnull=True).values_list("job_id", flat=True)) == {c.pk}


def test_a_refused_event_is_answered_in_its_place_and_the_others_are_applied(alice, cluster, node_client):
    [job] = admitted(alice, 1)
    elsewhere = admitted(alice, 1)[0]
    Allocation.objects.filter(job=elsewhere).update(node=cluster["nodes"][1])
    events = [{"job_id": job.pk, "attempt": 7, "type": "started"},  # not its attempt
              {"job_id": elsewhere.pk, "attempt": 1, "type": "started"},  # not this node's
              {"job_id": job.pk, "attempt": 1, "type": "started"},
              {"job_id": job.pk, "attempt": 1, "type": "exited", "exit_code": 0}]
    results = node_client().post(URL, {"events": events}, format="json").json()["results"]
    assert results[0]["status"] == 409 and results[0]["field"] == "attempt" and results[0]["job_id"] == job.pk
    assert results[1]["status"] == 404 and results[1]["field"] == "job_id"
    assert results[2:] == [{"job_id": job.pk, "state": "running"}, {"job_id": job.pk, "state": "succeeded"}]
    assert Job.objects.get(pk=elsewhere.pk).state == "admitted"


def test_a_checkpoint_goes_in_the_batch_before_the_end_of_its_attempt(alice, node_client):
    [job] = admitted(alice, 1)
    client = node_client()
    client.post(URL, {"events": [{"job_id": job.pk, "attempt": 1, "type": "started"}]}, format="json")
    job.refresh_from_db()
    at = job.started_at + timedelta(milliseconds=1)
    events = [{"job_id": job.pk, "attempt": 1, "type": "checkpoint", "at": at.isoformat()},
              {"job_id": job.pk, "attempt": 1, "type": "exited", "exit_code": 0}]
    results = client.post(URL, {"events": events}, format="json").json()["results"]
    assert results == [{"job_id": job.pk, "state": "running", "recorded": True,
                        "last_checkpoint_at": at.isoformat().replace("+00:00", "Z")},
                       {"job_id": job.pk, "state": "succeeded"}]
    assert Job.objects.get(pk=job.pk).last_checkpoint_at == at
    bad = client.post(URL, {"events": [{"job_id": job.pk, "attempt": 1, "type": "checkpoint", "at": "soon"}]},
                      format="json")
    assert bad.status_code == 400 and "at" in json.dumps(bad.json())


@pytest.mark.parametrize("body, field", [
    ({}, "events"), ({"events": []}, "events"),
    ({"events": [{"attempt": 1, "type": "started"}]}, "events"),  # no job_id
    ({"events": [{"job_id": 1, "attempt": 1, "type": "finished"}]}, "events"),
    ({"events": [{"job_id": 1, "attempt": 1, "type": "started"}] * 257}, "events"),
])
def test_a_malformed_batch_is_refused_whole_with_the_field_named(cluster, node_client, body, field):
    response = node_client().post(URL, body, format="json")
    assert response.status_code == 400 and field in response.json()["errors"], response.json()


def test_only_nodes_may_send_events(alice, api):
    assert api(alice).post(URL, {"events": []}, format="json").status_code in (401, 403)
