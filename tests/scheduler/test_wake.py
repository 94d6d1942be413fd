"""Wake-ups through Redis (scheduler/wake.py): a submit asks for a cycle and none is lost to a running one; a
cycle's starts and stops, and a cancel, reach the nodes concerned; a node long-polls for its news."""

import threading
import time

import psycopg
import pytest
import redis
from django.conf import settings
from django.db import connection

from portal import locks
from scheduler import tasks, wake
from scheduler.cycle import run_cycle
from scheduler.models import Job
from scheduler.services.jobs import job_cancel, job_submit

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_wakeups_yet():
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete(wake.CYCLE_WANTED, "celery", *client.keys("rota:node:*"))
    yield client


def _submit(user, **kw):
    return job_submit(user=user, name="j", command="true", gpu_model="h100-80gb", **kw)


def _queued_tasks(client) -> int:
    return client.llen("celery")


def test_a_submit_asks_for_a_cycle_and_the_cycle_that_reads_it_takes_the_request(
        alice, django_capture_on_commit_callbacks, _no_wakeups_yet):
    with django_capture_on_commit_callbacks(execute=True):
        _submit(alice)
    assert wake.cycle_requested()
    assert _queued_tasks(_no_wakeups_yet) == 1
    run_cycle()
    assert not wake.cycle_requested()


def test_a_burst_of_wakeups_answered_by_one_cycle_runs_no_more_cycles(alice):
    wake.cycle_request()
    assert tasks.run_cycle(wanted=True)["ran"]
    assert tasks.run_cycle(wanted=True) == {"ran": False, "skipped": "answered by an earlier cycle"}
    assert tasks.run_cycle()["ran"]  # beat's periodic run always runs


def _hold_cycle_lock():
    """Another session holding the cycle's lock, as a running cycle does."""
    db = connection.settings_dict
    other = psycopg.connect(host=db["HOST"] or "localhost", port=db["PORT"] or 5432, user=db["USER"] or "postgres",
                            dbname=db["NAME"])
    other.execute("SELECT pg_advisory_xact_lock(%s)", [locks.SCHEDULING_CYCLE])
    return other


def test_a_wakeup_that_finds_a_cycle_running_is_left_for_that_cycle_to_answer(alice):
    other = _hold_cycle_lock()
    try:
        wake.cycle_request()
        assert tasks.run_cycle(wanted=True)["ran"] is False
        assert wake.cycle_requested()  # not taken by a task that did not run
    finally:
        other.rollback()
        other.close()


def test_a_wakeup_that_comes_while_a_cycle_runs_asks_for_another_after_it(alice, monkeypatch, _no_wakeups_yet):
    from scheduler import cycle

    engine = cycle.schedule

    def submit_meanwhile(snapshot):  # a wake-up after the cycle took the flag, before it commits
        wake.cycle_request()
        return engine(snapshot)

    monkeypatch.setattr(cycle, "schedule", submit_meanwhile)
    assert tasks.run_cycle()["ran"]
    assert _queued_tasks(_no_wakeups_yet) == 1  # the next cycle is on its way


def test_a_cycle_tells_the_node_it_starts_a_job_on_and_no_other(alice, cluster, django_capture_on_commit_callbacks):
    _submit(alice)
    with django_capture_on_commit_callbacks(execute=True):
        assert run_cycle().started == 1
    h100, a100 = cluster["nodes"]
    assert wake.node_wait(h100.pk, 0.05)
    assert not wake.node_wait(h100.pk, 0.05)  # taken
    assert not wake.node_wait(a100.pk, 0.05)


def test_a_cycle_tells_all_the_nodes_it_starts_jobs_on_in_one_round_trip(
        alice, cluster, django_capture_on_commit_callbacks, monkeypatch):
    """At full size a cycle starts jobs on hundreds of nodes: one Redis round trip for their news, not one each."""
    from tests.factories import GpuFactory, NodeFactory

    nodes = [NodeFactory(name=f"node-w{i}", pool=cluster["pool"]) for i in range(3)]
    for i, node in enumerate(nodes):
        for k in range(8):
            GpuFactory(node=node, index=k, model=cluster["h100"], uuid=f"GPU-w{i}-{k}")
    cluster["vision"].quotas.update(limit=64)
    for _ in range(3):
        _submit(alice, gpus=8)  # one on each new node
    sent = []
    execute = redis.client.Pipeline.execute
    monkeypatch.setattr(redis.client.Pipeline, "execute",
                        lambda pipe, *a, **kw: sent.append(1) or execute(pipe, *a, **kw))
    with django_capture_on_commit_callbacks(execute=True):
        assert run_cycle().started == 3
    assert all(wake.node_wait(node.pk, 0) for node in nodes) and len(sent) == 1


def test_cancelling_a_holding_job_tells_its_node(alice, cluster, django_capture_on_commit_callbacks):
    job = _submit(alice)
    run_cycle()
    assert wake.node_wait(cluster["nodes"][0].pk, 0.05) is False  # the start's notice: not run (nothing commits)
    with django_capture_on_commit_callbacks(execute=True):
        job_cancel(user=alice, job=Job.objects.get(pk=job.pk))
    assert wake.node_wait(cluster["nodes"][0].pk, 0.05)


def test_the_wait_endpoint_answers_as_soon_as_the_node_has_news(cluster, node_client, settings):
    settings.ROTA_NODE_HEARTBEAT_INTERVAL_S = 10
    node = cluster["nodes"][0]
    client = node_client(node)
    threading.Timer(0.3, lambda: wake._push(wake.NODE_NEWS.format(node.pk))).start()
    started = time.monotonic()
    answer = client.post("/api/v1/node/wait/", {"timeout_s": 10}, format="json")
    assert answer.status_code == 200 and answer.json() == {"news": True, "waited": True}
    assert 0.25 < time.monotonic() - started < 5  # the news, not the 10 s timeout


def test_the_wait_endpoint_answers_no_news_after_the_timeout_at_most_a_heartbeat(cluster, node_client, settings):
    settings.ROTA_NODE_HEARTBEAT_INTERVAL_S = 1
    client = node_client(cluster["nodes"][0])
    started = time.monotonic()
    assert client.post("/api/v1/node/wait/", {"timeout_s": 0.2}, format="json").json() == {
        "news": False, "waited": True}
    assert 0.15 < time.monotonic() - started < 1.5
    started = time.monotonic()
    assert client.post("/api/v1/node/wait/", {"timeout_s": 60}, format="json").json()["news"] is False
    assert time.monotonic() - started < 5  # held a heartbeat interval (1 s), not 60 s


def test_the_wait_endpoint_names_a_bad_timeout_and_refuses_users(cluster, node_client, alice):
    from rest_framework.test import APIClient

    answer = node_client(cluster["nodes"][0]).post("/api/v1/node/wait/", {"timeout_s": -1}, format="json")
    assert answer.status_code == 400
    assert answer.json()["errors"]["timeout_s"] == ["Ensure this value is greater than or equal to 0."]
    user = APIClient()
    user.force_authenticate(alice)
    assert user.post("/api/v1/node/wait/", {}, format="json").status_code == 403


def test_when_every_waiting_slot_is_taken_the_node_is_told_at_once_to_poll(
        cluster, node_client, monkeypatch, settings):
    from scheduler.api import node as node_api

    settings.ROTA_NODE_HEARTBEAT_INTERVAL_S = 10
    monkeypatch.setattr(node_api, "_WAITING_SLOTS", threading.BoundedSemaphore(0))
    started = time.monotonic()
    answer = node_client(cluster["nodes"][0]).post("/api/v1/node/wait/", {"timeout_s": 10}, format="json")
    assert answer.json() == {"news": False, "waited": False}
    assert time.monotonic() - started < 5  # at once, not after the 10 s timeout


def test_when_redis_fails_the_node_is_told_at_once_to_poll(cluster, node_client, monkeypatch):
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    unreachable = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=0.5)
    monkeypatch.setattr(wake, "_wait_client", lambda: unreachable)
    answer = node_client(cluster["nodes"][0]).post("/api/v1/node/wait/", {"timeout_s": 2}, format="json")
    assert answer.json() == {"news": False, "waited": False}  # not "no news": the agent waits before asking again


def test_a_wait_outlasts_the_redis_clients_default_socket_timeout(cluster):
    """redis-py's sockets time out after 5 s by default: a longer wait must not end there without its news."""
    node = cluster["nodes"][0]
    threading.Timer(6, lambda: wake._push(wake.NODE_NEWS.format(node.pk))).start()
    started = time.monotonic()
    assert wake.node_wait(node.pk, 10) is True
    assert time.monotonic() - started > 5.5


def test_a_zero_timeout_only_looks(cluster, node_client):
    node = cluster["nodes"][0]
    client = node_client(node)
    assert client.post("/api/v1/node/wait/", {"timeout_s": 0}, format="json").json() == {"news": False, "waited": True}
    wake._push(wake.NODE_NEWS.format(node.pk))
    assert client.post("/api/v1/node/wait/", {"timeout_s": 0}, format="json").json() == {"news": True, "waited": True}


def test_a_node_turning_over_short_jobs_is_not_held_back_by_its_rate_limit(cluster, node_client):
    """About four calls a job (long-poll, heartbeat, started, exited): 700 in a minute, ~3 jobs/s, all served."""
    client = node_client(cluster["nodes"][0])
    answers = {client.post("/api/v1/node/wait/", {"timeout_s": 0}, format="json").status_code for _ in range(700)}
    assert answers == {200}


def test_wakeups_while_one_is_outstanding_send_no_more_messages(alice, django_capture_on_commit_callbacks,
                                                               _no_wakeups_yet):
    with django_capture_on_commit_callbacks(execute=True):
        first = [_submit(alice) for _ in range(3)]
    assert _queued_tasks(_no_wakeups_yet) == 1 and wake.cycle_requested()  # one message answers all three
    run_cycle()  # takes the flag, reads them all
    assert Job.objects.filter(pk__in=[j.pk for j in first], state="admitted").count() == 3
    with django_capture_on_commit_callbacks(execute=True):
        _submit(alice)
    assert _queued_tasks(_no_wakeups_yet) == 2  # the flag was down again: this one sends its own
    assert tasks.run_cycle.delay() and _queued_tasks(_no_wakeups_yet) == 3  # a cycle's own ask always sends
