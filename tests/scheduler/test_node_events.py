"""``POST /api/v1/node/events/``: a node's job events in one request, each judged as the single-event endpoint
judges it, in order, and the cycle woken once for the batch."""

import json
from datetime import timedelta

import pytest
import redis
from django.conf import settings
from django.db.models import F

from scheduler import wake
from scheduler.cycle import run_cycle
from scheduler.models import Allocation, Job, JobTransition
from scheduler.services.jobs import job_submit
from tests.reliability.helpers import assert_sound

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


def _roomy(cluster):
    """A second node of 8 h100s, and room in vision's quota for them."""
    from tests.factories import GpuFactory, NodeFactory

    node = NodeFactory(name="node-x", pool=cluster["pool"])
    for k in range(8):
        GpuFactory(node=node, index=k, model=cluster["h100"], uuid=f"GPU-x-{k}")
    cluster["vision"].quotas.update(limit=64)
    return node


def _mixed(alice, cluster):
    """Four admitted jobs on node-h100 (one of them retried once when it fails) and one held elsewhere, and a
    batch about them with refused events in the middle: a start of an attempt that is not the job's, a start
    of another node's job, a start repeated, an exit, an exit that requeues its job followed by a report
    about the attempt it ended, an exit repeated."""
    plain = dict(command="true", gpu_model="h100-80gb")
    jobs = [job_submit(user=alice, name="a", **plain), job_submit(user=alice, name="b", max_retries=1,
                                                                     retry_on=["failed"], retry_backoff_s=600, **plain),
            job_submit(user=alice, name="c", **plain), job_submit(user=alice, name="d", **plain)]
    run_cycle()
    a, b, c, d = (Job.objects.get(pk=job.pk) for job in jobs)
    Allocation.objects.filter(job=d).update(node=cluster["nodes"][1])
    assert {job.state for job in (a, b, c, d)} == {"admitted"}
    on = {"attempt": 1}
    return (a, b, c, d), [
        {"job_id": a.pk, **on, "type": "started", "pid": 1},
        {"job_id": c.pk, "attempt": 7, "type": "started"},  # refused: not its attempt
        {"job_id": d.pk, **on, "type": "started"},  # refused: another node's job
        {"job_id": b.pk, **on, "type": "started"},
        {"job_id": a.pk, **on, "type": "started"},  # repeated: changes nothing
        {"job_id": c.pk, **on, "type": "started"},
        {"job_id": b.pk, **on, "type": "exited", "exit_code": 3},  # retried: pending as attempt 2
        {"job_id": b.pk, **on, "type": "exited", "exit_code": 3},  # refused now: attempt 1 is not its attempt
        {"job_id": a.pk, **on, "type": "exited", "exit_code": 0},
        {"job_id": a.pk, **on, "type": "exited", "exit_code": 0},  # a resend: changes nothing
        {"job_id": c.pk, **on, "type": "start_failed", "message": "no such file"},
    ]


def _seen(jobs, results) -> tuple:
    """The answers and what the jobs became, with each job named by its place (two runs have other ids)."""
    import re

    place = {job.pk: f"#{i}" for i, job in enumerate(jobs)}
    answers = [{**r, "job_id": place[r["job_id"]],
                **({"detail": re.sub(r"job (\d+)", lambda m: f"job {place[int(m[1])]}", r["detail"])}
                   if "detail" in r else {})} for r in results]
    rows = [(place[job.pk], job.state, job.attempt, job.exit_code, job.attained_gpu_seconds > 0,
             [(t.from_state, t.to_state, t.cause) for t in job.transitions.order_by("at", "pk")],
             sorted((a.attempt, a.ended_at is None) for a in job.allocations.all()))
            for job in Job.objects.filter(pk__in=place).order_by("pk")]
    return answers, rows


def test_a_batch_is_answered_and_applied_as_its_events_one_by_one_refused_ones_in_the_middle_included(
        alice, cluster, node_client):
    """One transaction for the batch, and each event judged as if it came alone: a refused event is answered in
    its place and holds up none of the others, and the answers and the jobs' histories are those of the same
    events sent one by one to the single event's endpoint."""
    _roomy(cluster)
    client = node_client()
    jobs, events = _mixed(alice, cluster)
    batched = _seen(jobs, client.post(URL, {"events": events}, format="json").json()["results"])
    Allocation.objects.filter(ended_at__isnull=True).update(ended_at=F("started_at"))  # GPUs free for the second run
    Job.objects.filter(state__in=("admitted", "pending")).update(state="cancelled")
    jobs, events = _mixed(alice, cluster)
    one_by_one = []
    for event in events:
        body = {k: v for k, v in event.items() if k != "job_id"}
        answer = client.post(f"/api/v1/node/jobs/{event['job_id']}/events/", body, format="json")
        one_by_one.append(answer.json() if answer.status_code == 200 else
                          {"job_id": event["job_id"], "status": answer.status_code, **answer.json()})
    assert batched == _seen(jobs, one_by_one)
    answers, rows = batched
    assert [r.get("status") for r in answers] == [None, 409, 404, None, None, None, None, 409, None, None, None]
    assert [row[1:4] for row in rows] == [("succeeded", 1, 0), ("pending", 2, None), ("failed", 1, -1),
                                          ("admitted", 1, None)]


def test_a_batch_sent_again_after_its_answer_was_lost_changes_nothing(alice, cluster, node_client):
    client = node_client()
    jobs = admitted(alice, 3)
    events = [{"job_id": job.pk, "attempt": 1, "type": "started"} for job in jobs] + [
        {"job_id": job.pk, "attempt": 1, "type": "exited", "exit_code": i} for i, job in enumerate(jobs[:2])]
    first = client.post(URL, {"events": events}, format="json").json()["results"]
    before = (list(Job.objects.order_by("pk").values()), list(Allocation.objects.order_by("pk").values()),
              list(JobTransition.objects.order_by("pk").values_list("pk", flat=True)))
    again = client.post(URL, {"events": events}, format="json").json()["results"]
    assert [r["state"] for r in first] == ["running", "running", "running", "succeeded", "failed"]
    assert again == [{"job_id": r["job_id"], "state": Job.objects.get(pk=r["job_id"]).state} for r in first]
    assert (list(Job.objects.order_by("pk").values()), list(Allocation.objects.order_by("pk").values()),
            list(JobTransition.objects.order_by("pk").values_list("pk", flat=True))) == before
    assert_sound()


def test_a_batch_that_fails_midway_leaves_nothing_half_written(alice, node_client, monkeypatch):
    """A refusal is an answer; an error is not: the batch's transaction rolls back whole (its starts
    included) and the node, answered 500, sends it again."""
    from scheduler.services import node_event_batch

    jobs = admitted(alice, 2)
    before = list(Job.objects.order_by("pk").values())

    def broken(job, *args, **kwargs):
        raise RuntimeError("the database went away")

    monkeypatch.setattr(node_event_batch, "_attempt_ended_here", broken)
    events = [{"job_id": job.pk, "attempt": 1, "type": "started"} for job in jobs] + [
        {"job_id": jobs[1].pk, "attempt": 1, "type": "exited", "exit_code": 0}]
    with pytest.raises(RuntimeError):
        node_event_batch.node_events_apply(node=Allocation.objects.get(job=jobs[0]).node, events=events)
    assert list(Job.objects.order_by("pk").values()) == before
    assert Allocation.objects.filter(ended_at__isnull=True).count() == 2


def test_a_gang_members_end_tells_the_other_members_node_at_once(alice, cluster, node_client,
                                                                 django_capture_on_commit_callbacks):
    """The gang's other members are asked to stop; their node hears it now (its long-poll returns), not at
    its next heartbeat. One push for the batch."""
    [job] = [job_submit(user=alice, name="gang", command="true", gpu_model="h100-80gb", gpus=2)]
    run_cycle()
    other = _roomy(cluster)
    Allocation.objects.filter(pk=Allocation.objects.filter(job=job).order_by("pk")[1].pk).update(node=other)
    news = redis.Redis.from_url(settings.REDIS_URL)
    news.delete(wake.NODE_NEWS.format(other.pk))
    end = {"job_id": job.pk, "attempt": 1, "type": "exited", "exit_code": 1}
    with django_capture_on_commit_callbacks(execute=True):
        results = node_client().post(URL, {"events": [end]}, format="json").json()["results"]
    assert results == [{"job_id": job.pk, "state": "admitted"}]
    assert Job.objects.get(pk=job.pk).stop_reason == "gang-exit"
    assert news.llen(wake.NODE_NEWS.format(other.pk)) == 1
