"""A transition becomes a notification task only when someone could be told of it: a job nobody asked about
turns over without one Celery message for notifications; one somebody asked about sends exactly one task,
for the transition they asked about (``notifications.services.transitions_wanted``)."""

import base64
import json

import pytest
import redis
from django.conf import settings

from notifications.services import preference_save
from scheduler.cycle import run_cycle
from scheduler.services.arrays import array_submit
from scheduler.services.jobs import job_submit

pytestmark = pytest.mark.django_db

JOB = {"command": "true", "gpu_model": "h100-80gb"}


@pytest.fixture
def queue():
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete("celery")
    yield client
    client.delete("celery")


def told(queue) -> list[int]:
    """The transitions whose notification task was sent to the real broker, in order."""
    messages = [json.loads(m) for m in queue.lrange("celery", 0, -1)]
    return [json.loads(base64.b64decode(m["body"]))[0][0] for m in reversed(messages)
            if m["headers"]["task"] == "notifications.transition"]


def subscribe(user, events, scope="mine"):
    preference_save(user=user, events=events, scope=scope, email_enabled=False, webhook_url="")


def run_job(client, job, exit_code, capture):
    """Admit, start and end ``job``, running each step's after-commit work (the tasks it sends)."""
    with capture(execute=True):
        run_cycle()
    job.refresh_from_db()
    for event in ({"type": "started"}, {"type": "exited", "exit_code": exit_code}):
        with capture(execute=True):
            answer = client.post(f"/api/v1/node/jobs/{job.pk}/events/", {"attempt": job.attempt, **event},
                                 format="json")
        assert answer.status_code == 200, answer.json()
    job.refresh_from_db()
    return job


def test_a_job_nobody_asked_about_sends_no_notification_task(alice, bob, charlie, node_client, queue,
                                                             django_capture_on_commit_callbacks):
    subscribe(alice, ["job-failed"])  # the submitter asked, but not about a success
    subscribe(bob, ["job-succeeded"], scope="mine")  # a team mate, about his own jobs only
    subscribe(charlie, ["job-started", "job-succeeded"], scope="team")  # another team
    job = job_submit(user=alice, name="t", **JOB)
    job = run_job(node_client(), job, 0, django_capture_on_commit_callbacks)
    assert job.state == "succeeded"
    assert told(queue) == []


def test_a_job_somebody_asked_about_sends_one_task_for_the_transition_asked_about(
        alice, bob, node_client, queue, django_capture_on_commit_callbacks):
    subscribe(bob, ["job-succeeded"], scope="team")
    job = job_submit(user=alice, name="t", **JOB)
    job = run_job(node_client(), job, 0, django_capture_on_commit_callbacks)
    assert told(queue) == [job.transitions.get(to_state="succeeded").pk]


def test_an_inactive_subscriber_is_not_asked_for(alice, node_client, queue, django_capture_on_commit_callbacks):
    subscribe(alice, ["job-started", "job-succeeded"])
    alice.is_active = False
    alice.save(update_fields=["is_active"])
    run_job(node_client(), job_submit(user=alice, name="t", **JOB), 0, django_capture_on_commit_callbacks)
    assert told(queue) == []


def test_an_array_task_sends_its_task_to_whoever_asked_for_the_array_s_end(
        alice, node_client, queue, django_capture_on_commit_callbacks):
    subscribe(alice, ["array-completed"])
    [task] = array_submit(user=alice, array="0-0", name="sweep", **JOB).tasks.all()
    task = run_job(node_client(), task, 0, django_capture_on_commit_callbacks)
    # the start and the end: either may be the array's last news (the task decides, as its array stands then)
    assert told(queue) == [task.transitions.get(to_state=s).pk for s in ("running", "succeeded")]


def test_a_batch_of_events_sends_a_task_for_each_transition_somebody_asked_about_and_none_other(
        alice, bob, node_client, queue, django_capture_on_commit_callbacks):
    """The batch's transitions are checked together (``transitions_wanted``, one query): each is still judged
    on its own job's subscribers and its own event."""
    subscribe(alice, ["job-started"])  # her own jobs' starts
    subscribe(bob, ["job-succeeded"])  # his own jobs' successes
    jobs = [job_submit(user=user, name="t", **JOB) for user in (alice, bob, alice, bob)]
    with django_capture_on_commit_callbacks(execute=True):
        run_cycle()
    client = node_client()

    def batch(**event):
        with django_capture_on_commit_callbacks(execute=True):
            answer = client.post("/api/v1/node/events/", {"events": [
                {"job_id": job.pk, "attempt": 1, **event} for job in jobs]}, format="json")
        assert answer.status_code == 200 and all(r["state"] for r in answer.json()["results"]), answer.json()

    batch(type="started")
    batch(type="exited", exit_code=0)
    assert told(queue) == ([jobs[i].transitions.get(to_state="running").pk for i in (0, 2)]
                           + [jobs[i].transitions.get(to_state="succeeded").pk for i in (1, 3)])
