"""The node long-poll held on the ASGI server's event loop (portal/longpoll.py), served for real: gunicorn with
deploy/gunicorn_asgi.conf.py (as make serve runs it) on the test database and Redis, one worker of two web
threads. Held waits take no thread, news wakes its node's wait only, a node that hangs up frees its slot, and
the answers to a bad token or a bad timeout are the WSGI view's."""

import json
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis
import requests
from django.conf import settings
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from scheduler import wake
from scheduler.cycle import run_cycle
from scheduler.models import Job, NodeToken
from scheduler.services.jobs import job_submit
from tests.factories import NodeFactory
from tests.processes import wait_for

pytestmark = pytest.mark.django_db(transaction=True)
WAIT = "/api/v1/node/wait/"


def _forget_news() -> None:
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete(*client.keys("rota:node:*") or ["-"])


@pytest.fixture(autouse=True)
def _no_news_yet():
    _forget_news()


def _held_waits() -> int:
    """BLPOPs blocked on this test's Redis database now by a wait held on an event loop: the gunicorn's long-polls.
    Not a wait another test's in-process live server still holds in a thread for an agent it stopped (up to
    that test's heartbeat interval: it made this count 51 after tests/e2e), nor a Celery worker's BRPOP."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    db = client.connection_pool.connection_kwargs.get("db", 0)
    return sum(1 for c in client.client_list() if "b" in c["flags"] and int(c["db"]) == db and c["cmd"] == "blpop"
               and c["name"] == wake.LOOP_WAIT_CLIENT_NAME)


def _blocked_clients() -> list[str]:
    client = redis.Redis.from_url(settings.REDIS_URL)
    return [f"{c['cmd']}@db{c['db']}:{c['name']}" for c in client.client_list() if "b" in c["flags"]]


def _wait(base: str, token: str, timeout_s: float) -> dict:
    answer = requests.post(base + WAIT, json={"timeout_s": timeout_s}, headers={"Authorization": f"Node {token}"},
                           timeout=timeout_s + 30)
    assert answer.status_code == 200
    return answer.json()


def test_fifty_held_long_polls_leave_two_web_threads_free_and_news_wakes_its_node_only(serve, cluster, alice):
    base = serve()
    nodes = [NodeFactory(pool=cluster["pool"]) for _ in range(50)]
    tokens = {node.pk: NodeToken.issue(node)[1] for node in nodes}
    user = {"Authorization": f"Token {Token.objects.create(user=alice).key}"}
    with ThreadPoolExecutor(len(nodes)) as clients:
        began = time.monotonic()
        waits = {pk: clients.submit(_wait, base, token, 25) for pk, token in tokens.items()}
        try:
            wait_for(lambda: _held_waits() == 50, timeout=30, what="50 long-polls held at once")
        except AssertionError as exc:  # say what Redis held instead, and what the ended waits got
            ended = [w.exception() or w.result() for w in waits.values() if w.done()][:3]
            raise AssertionError(f"{exc}; blocked in Redis: {sorted(_blocked_clients())}; {len(ended)} ended: "
                                 f"{ended}") from None
        for _ in range(5):  # the two web threads are free: ordinary requests answered at once
            started = time.monotonic()
            assert requests.get(f"{base}/api/v1/jobs/", headers=user, timeout=10).json()["count"] == 0
            assert time.monotonic() - started < 2

        woken = nodes[7].pk
        wake._push(wake.NODE_NEWS.format(woken))
        assert waits[woken].result(timeout=5) == {"news": True, "waited": True}
        time.sleep(max(0.5, began + 6.5 - time.monotonic()))  # past redis-py's default socket timeout (5 s)
        assert not any(wait.done() for pk, wait in waits.items() if pk != woken) and _held_waits() == 49

        wake._push(*(wake.NODE_NEWS.format(pk) for pk in tokens if pk != woken))
        assert all(wait.result(timeout=10) == {"news": True, "waited": True} for wait in waits.values())
    assert _held_waits() == 0


def test_a_node_that_hangs_up_frees_its_slot_and_past_the_limit_a_node_is_told_to_poll(serve, cluster):
    base = serve(ROTA_NODE_ASYNC_WAITERS_PER_PROCESS="1")
    token = NodeToken.issue(cluster["nodes"][0])[1]
    body = json.dumps({"timeout_s": 25}).encode()
    gone = socket.create_connection(("127.0.0.1", int(base.rsplit(":", 1)[1])))
    gone.sendall(b"POST " + WAIT.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 + f"Authorization: Node {token}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
    wait_for(lambda: _held_waits() == 1, timeout=15, what="the long-poll to be held")

    started = time.monotonic()
    assert _wait(base, token, 10) == {"news": False, "waited": False}  # its one slot is taken
    assert time.monotonic() - started < 3

    gone.close()
    wait_for(lambda: _held_waits() == 0, timeout=5, what="the wait of the node that hung up to end")
    started = time.monotonic()
    assert _wait(base, token, 0.5) == {"news": False, "waited": True}  # the slot is free again
    assert 0.4 < time.monotonic() - started < 3


def test_a_bad_token_or_timeout_is_answered_as_the_wsgi_view_answers_it(serve, cluster):
    base = serve()
    node = cluster["nodes"][0]
    good = NodeToken.issue(node)[1]
    revoked, revoked_raw = NodeToken.issue(node)
    NodeToken.objects.filter(pk=revoked.pk).update(revoked_at=revoked.created_at)
    cases = [
        ("Node rn_not-a-token", {"timeout_s": 1}),
        (f"Node {revoked_raw}", {"timeout_s": 1}),
        ("Node", {"timeout_s": 1}),
        ("", {"timeout_s": 1}),
        (f"Node {good}", {"timeout_s": -1}),
        (f"Node {good}", {"timeout_s": "soon"}),
        (f"Node {good}", {"timeout_s": 301}),
        (f"Node {good}", {"timeout_s": 0}),  # accepted: parity of the answer and its headers
    ]
    for authorization, body in cases:
        served = requests.post(base + WAIT, json=body, headers={"Authorization": authorization} if authorization
                               else {}, timeout=10)
        reference = APIClient().post(WAIT, body, format="json",
                                     **({"HTTP_AUTHORIZATION": authorization} if authorization else {}))
        assert (served.status_code, served.json()) == (reference.status_code, reference.json()), authorization
        for header in ("Content-Type", "WWW-Authenticate", "Vary", "Allow", "X-Frame-Options",
                       "X-Content-Type-Options", "Referrer-Policy", "Cross-Origin-Opener-Policy"):
            assert served.headers.get(header) == reference.headers.get(header), (header, body)
    assert served.json() == {"news": False, "waited": True}
    assert int(served.headers["Content-Length"]) == len(served.content)


def test_without_redis_a_node_is_told_at_once_to_poll(serve, cluster):
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        dead = sock.getsockname()[1]
    base = serve(REDIS_URL=f"redis://127.0.0.1:{dead}/0")
    token = NodeToken.issue(cluster["nodes"][0])[1]
    started = time.monotonic()
    assert _wait(base, token, 10) == {"news": False, "waited": False}  # not "no news": the agent waits first
    assert time.monotonic() - started < 5


def test_news_brings_the_nodes_assignments_from_a_delivery_thread_when_it_asks(serve, cluster, alice):
    """The wait is held on the loop; with news, the delivery runs in a thread of the node lane and its answer goes
    out in the long-poll's: the job admitted to the node comes in it, marked delivered (``starting``)."""
    base = serve()
    node = cluster["nodes"][0]
    token = NodeToken.issue(node)[1]
    job = job_submit(user=alice, name="j", command="echo hi", gpu_model="h100-80gb")
    run_cycle()
    assert Job.objects.get(pk=job.pk).state == "admitted"
    _forget_news()  # the cycle's own news for the node: the wait below is held, then woken
    with ThreadPoolExecutor(1) as client:
        held = client.submit(requests.post, base + WAIT, json={"timeout_s": 25, "assignments": True},
                             headers={"Authorization": f"Node {token}"}, timeout=60)
        wait_for(lambda: _held_waits() == 1, timeout=15, what="the long-poll to be held")
        wake._push(wake.NODE_NEWS.format(node.pk))
        answer = held.result(timeout=10)
    told = answer.json()
    assert answer.status_code == 200 and int(answer.headers["Content-Length"]) == len(answer.content)
    assert (told["news"], told["waited"], [a["job_id"] for a in told["assignments"]]) == (True, True, [job.pk])
    assert told["as_of"] and Job.objects.get(pk=job.pk).state == "starting"
