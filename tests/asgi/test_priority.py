"""Interactive requests before the nodes' bulk reports (portal/priority.py): which lane a request takes, a lane's
queue (first come first served, a request whose client hung up while queued is not run), and, served for real
by gunicorn (one worker of two interactive threads and one bulk thread), a user's request and a node's
heartbeat answered at once while node events hold the bulk lane and queue behind it, and every queued event
applied once the lane is free; past the bulk queue's bound (``ROTA_WEB_BULK_QUEUE``) a report is answered 429 at
once with ``Retry-After``."""

import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import psycopg
import pytest
import requests
from django.db import connection
from django.urls import NoReverseMatch, reverse
from rest_framework.authtoken.models import Token

from portal import priority
from scheduler.cycle import run_cycle
from scheduler.models import Job, NodeToken
from scheduler.models.jobs import JobState
from scheduler.services.jobs import job_submit
from tests.processes import wait_for


@pytest.mark.parametrize(("method", "path", "lane"), [
    ("POST", "/api/v1/node/events/", priority.BULK),
    ("POST", "/api/v1/node/jobs/12/events/", priority.BULK),
    ("POST", "/api/v1/node/jobs/12/log/", priority.BULK),
    ("POST", "/api/v1/node/slurm/accounting/", priority.BULK),
    ("POST", "/api/v1/node/heartbeat/", priority.INTERACTIVE),
    ("POST", "/api/v1/node/register/", priority.NODE),
    ("POST", "/api/v1/node/wait/", priority.NODE),
    ("GET", "/api/v1/node/events/", priority.INTERACTIVE),  # not a report: answered 405 at once
    ("POST", "/api/v1/node/jobs/abc/log/", priority.INTERACTIVE),  # no route: a 404
    ("POST", "/api/v1/node/", priority.INTERACTIVE),
    ("POST", "/api/v1/jobs/", priority.INTERACTIVE),
    ("GET", "/api/v1/jobs/", priority.INTERACTIVE),
    ("POST", "/api/v1/jobs/12/cancel/", priority.INTERACTIVE),
    ("GET", "/", priority.INTERACTIVE),
    ("POST", "/login/", priority.INTERACTIVE),
])
def test_reports_are_bulk_register_and_long_poll_node_and_every_other_request_interactive(method, path, lane):
    assert priority.lane_of({"type": "http", "method": method, "path": path}) == lane


def test_every_bulk_route_is_a_route_under_the_node_prefix_and_its_posts_are_bulk():
    def path(name: str) -> str:
        try:
            return reverse(name)
        except NoReverseMatch:
            return reverse(name, kwargs={"job_id": 1})

    paths = {name: path(name) for name in priority.BULK_ROUTES}
    assert all(path.startswith(priority.NODE_PREFIX) for path in paths.values()), paths
    assert {priority.lane_of({"method": "POST", "path": path}) for path in paths.values()} == {priority.BULK}


def test_a_lane_runs_its_queue_in_order_and_skips_a_request_whose_client_hung_up():
    lane = priority.Lane("test", 1)
    gate = threading.Event()
    ran: list[str] = []

    def call(name: str) -> str:
        if name == "first":
            gate.wait(30)
        ran.append(name)
        return name

    async def scenario():
        hang_up = asyncio.Event()

        async def connected():  # a client still there: no message until the test ends
            await asyncio.Event().wait()

        async def leaves():
            await hang_up.wait()
            return {"type": "http.disconnect"}

        first = asyncio.ensure_future(lane.run(connected, call, "first"))
        await asyncio.sleep(0)  # the first takes the lane's one thread at once: the others queue behind it
        queued = [asyncio.ensure_future(lane.run(leaves if name == "gone" else connected, call, name))
                  for name in ("second", "gone", "third")]
        await asyncio.sleep(0)
        hang_up.set()
        gone = await queued[1]  # answered while the first still holds the lane's one thread
        assert not first.done() and ran == []
        gate.set()
        return [await first, gone, await queued[0], await queued[2]]

    try:
        assert asyncio.run(scenario()) == ["first", priority.HUNG_UP, "second", "third"]
        assert ran == ["first", "second", "third"]
    finally:
        gate.set()
        lane.executor.shutdown()


def test_each_node_turned_away_is_given_a_later_turn_than_the_one_before():
    """Refused nodes come back when told: a Retry-After that counted only the queue would send every refused
    one back at the same moment, to find it full again. Each is given the next turn, a request's time in a
    thread over the threads after the last one's."""
    lane = priority.Lane("test", 2, queue=0)
    lane._slots = asyncio.Semaphore(0)  # no thread free: every request is refused at once
    lane.request_s = 1.0

    async def refuse(n: int) -> list[int]:
        waits = []
        for _ in range(n):
            assert await lane.run(None, print) is priority.FULL
            waits.append(lane.retry_after_s())
        return waits

    try:
        assert asyncio.run(refuse(6)) == [1, 1, 2, 2, 3, 3]  # ceil(turn x 1 s / 2 threads)
    finally:
        lane.executor.shutdown()


def test_a_lane_with_a_bounded_queue_refuses_past_it_and_names_when_the_queue_clears():
    """Two threads, a queue of 4: a fifth waiting request is refused (``FULL``, not run); ``Retry-After`` is
    the waiting requests' recent time in a thread over the threads (here 4 x 3 s / 2 = 6 s), at least 1 s, or
    the turn given to the last refused request when that is later."""
    lane = priority.Lane("test", 2, queue=4)
    gate = threading.Event()

    def call(name: str) -> str:
        gate.wait(30)
        return name

    async def scenario():
        async def connected():
            await asyncio.Event().wait()

        running = [asyncio.ensure_future(lane.run(connected, call, n)) for n in ("a", "b")]
        await asyncio.sleep(0)
        queued = [asyncio.ensure_future(lane.run(connected, call, n)) for n in ("c", "d", "e", "f")]
        await asyncio.sleep(0)
        assert lane.waiting == 4 and lane.retry_after_s() == 1  # 4 x 0.5 s (the first guess) / 2
        refused = await lane.run(connected, call, "g")
        lane.request_s = 3.0
        wait = lane.retry_after_s()
        gate.set()
        done = [await each for each in running + queued]
        return refused, wait, done, lane.waiting, lane.retry_after_s()

    try:
        refused, wait, done, waiting, after = asyncio.run(scenario())
        assert (refused, wait, done, waiting) == (priority.FULL, 6, ["a", "b", "c", "d", "e", "f"], 0)
        assert after == 2  # the refused one's turn, given at 0.5 s a request: (4 + 1) x 0.5 s / 2 from then
        lane.promised_at -= 60  # a minute later: past
        assert lane.retry_after_s() == 1
    finally:
        gate.set()
        lane.executor.shutdown()


def _lock_waiters() -> int:
    """Database sessions of the portal waiting for a row lock now."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                       "AND wait_event_type = 'Lock'")
        return cursor.fetchone()[0]


def _placed_job_and_its_report(base: str, alice, node) -> tuple[Job, Callable[[], requests.Response]]:
    """A job admitted onto ``node``, and a function sending ``node``'s report that it started (bulk lane)."""
    job = job_submit(user=alice, name="held", command="true", gpu_model="h100-80gb")
    run_cycle()
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED and job.allocations.filter(node=node).exists()
    node_auth = {"Authorization": f"Node {NodeToken.issue(node)[1]}"}
    event = {"events": [{"job_id": job.pk, "attempt": job.attempt, "type": "started"}]}

    def report() -> requests.Response:
        return requests.post(f"{base}/api/v1/node/events/", json=event, headers=node_auth, timeout=120)

    return job, report


@contextmanager
def _row_locked(job: Job) -> Iterator[psycopg.Connection]:
    """``job``'s row locked by another connection until its ``commit``: the bulk thread applying a report on it
    waits there."""
    db = connection.settings_dict
    with psycopg.connect(host=db["HOST"] or "localhost", port=db["PORT"] or 5432, user=db["USER"] or "postgres",
                         dbname=db["NAME"]) as holder:
        holder.execute("SELECT 1 FROM scheduler_job WHERE id = %s FOR UPDATE", [job.pk])
        yield holder


@pytest.mark.django_db(transaction=True)
def test_while_node_events_hold_and_fill_the_bulk_lane_users_and_heartbeats_are_served_at_once(serve, cluster,
                                                                                                alice):
    base = serve(ROTA_WEB_BULK_THREADS="1")
    node, other = cluster["nodes"]
    job, report = _placed_job_and_its_report(base, alice, node)  # placed on node-h100: its start is reported next
    user = {"Authorization": f"Token {Token.objects.create(user=alice).key}"}

    with _row_locked(job) as holder, ThreadPoolExecutor(6) as nodes:
        reports = [nodes.submit(report) for _ in range(6)]
        wait_for(lambda: _lock_waiters() == 1, timeout=30, what="the bulk lane's one thread held by the row lock")

        answer = requests.get(f"{base}/api/v1/jobs/", headers=user, timeout=30)
        assert answer.status_code == 200 and answer.json()["count"] == 1
        beat = requests.post(f"{base}/api/v1/node/heartbeat/", json={"seq": 1},
                             headers={"Authorization": f"Node {NodeToken.issue(other)[1]}"}, timeout=30)
        assert beat.status_code == 200, beat.text
        assert _lock_waiters() == 1 and not any(each.done() for each in reports)  # bulk held and queued still

        holder.commit()
        answers = [each.result(timeout=120) for each in reports]
    assert [each.status_code for each in answers] == [200] * 6
    assert [each.json()["results"][0]["state"] for each in answers] == [JobState.RUNNING] * 6
    assert Job.objects.get(pk=job.pk).state == JobState.RUNNING


@pytest.mark.django_db(transaction=True)
def test_past_the_bulk_queues_bound_a_report_is_answered_429_with_retry_after_and_the_queued_ones_applied(
        serve, cluster, alice):
    base = serve(ROTA_WEB_BULK_THREADS="1", ROTA_WEB_BULK_QUEUE="2")
    job, report = _placed_job_and_its_report(base, alice, cluster["nodes"][0])

    with _row_locked(job) as holder, ThreadPoolExecutor(6) as nodes:
        held = nodes.submit(report)
        wait_for(lambda: _lock_waiters() == 1, timeout=30, what="the bulk lane's one thread held by the row lock")
        reports = [nodes.submit(report) for _ in range(5)]  # 2 queue, 3 find the queue full
        wait_for(lambda: sum(each.done() for each in reports) == 3, timeout=30, what="three answered at once")
        busy = [each.result() for each in reports if each.done()]
        assert [each.status_code for each in busy] == [429] * 3, [each.text for each in busy]
        assert all(int(each.headers["Retry-After"]) >= 1 for each in busy)
        assert "busy" in busy[0].json()["detail"]
        assert _lock_waiters() == 1 and not held.done()  # the held one and the two queued wait still

        holder.commit()
        answers = [held.result(timeout=120)] + [each.result(timeout=120) for each in reports
                                                if each.result(timeout=120).status_code != 429]
    assert [each.status_code for each in answers] == [200] * 3
    assert [each.json()["results"][0]["state"] for each in answers] == [JobState.RUNNING] * 3
    assert Job.objects.get(pk=job.pk).state == JobState.RUNNING


def _in_every_thread(lane: priority.Lane, call: Callable[[], object]) -> list[object]:
    """``call()`` once in each of the lane's threads (each call holds its thread until all have started)."""
    gate = threading.Barrier(lane.threads, timeout=10)

    def held() -> object:
        gate.wait()
        return call()

    return [future.result(timeout=20) for future in [lane.executor.submit(held) for _ in range(lane.threads)]]


@pytest.mark.django_db(transaction=True)
def test_a_warmed_lane_has_every_thread_started_with_its_database_connection_open():
    lane = priority.Lane("warm", 3)
    try:
        assert len(lane.executor._threads) == 0  # a pool starts its threads only as requests come
        lane.warm()
        assert len(lane.executor._threads) == 3
        seen = _in_every_thread(lane, lambda: (threading.get_ident(), connection.connection is not None))
        assert len({ident for ident, _open in seen}) == 3 and all(opened for _ident, opened in seen)
        assert len(lane.executor._threads) == 3  # the checks ran in the warmed threads, none was added
    finally:
        _in_every_thread(lane, lambda: connection.close())
        lane.executor.shutdown()


@pytest.mark.django_db(transaction=True)
def test_a_lane_warms_as_many_threads_as_asked_and_starts_the_rest_as_its_load_needs_them():
    lane = priority.Lane("warm", 3)
    try:
        lane.warm(2)
        assert len(lane.executor._threads) == 2
        lane.warm(0)
        assert len(lane.executor._threads) == 2
    finally:
        _in_every_thread(lane, lambda: connection.close())
        lane.executor.shutdown()


def test_a_lane_that_cannot_reach_the_database_still_starts_and_says_why():
    """Warming is best effort: a worker whose database is down at its start boots, logs it, and each thread
    connects at its first request, as it did before."""
    script = ("import django, logging; django.setup(); logging.basicConfig(); from portal import priority; "
              "priority.Lane('warm', 2).warm(timeout_s=2); print('booted')")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings",
           "DATABASE_URL": "postgres://postgres@127.0.0.1:9/rota"}  # the discard port: nothing listens
    ran = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0 and "booted" in ran.stdout, ran.stderr
    assert "lane warm: a thread did not connect ahead of its first request" in ran.stderr


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("setting", "warmed"), [(None, 3), ("1", 1), ("0", 0)])
def test_a_worker_warms_every_thread_of_its_roles_lanes_unless_told_fewer(monkeypatch, setting, warmed):
    from portal import asgi

    lane = priority.Lane("warm", 3)
    monkeypatch.setattr(asgi, "lanes", {**asgi.lanes, priority.INTERACTIVE: lane})
    if setting is None:
        monkeypatch.delenv("ROTA_WEB_WARM_THREADS", raising=False)
    else:
        monkeypatch.setenv("ROTA_WEB_WARM_THREADS", setting)
    try:
        asgi.warm("control")
        assert len(lane.executor._threads) == warmed
    finally:
        if warmed:
            _in_every_thread(lane, lambda: connection.close())
        lane.executor.shutdown()
