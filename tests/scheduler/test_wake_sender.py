"""The wake-up sender (scheduler/wake_sender.py): a commit's wake-ups are sent by the process's sender thread, so
the request that committed does not wait for Redis; those that come while it is busy go as one round; a child
process after a fork starts its own sender."""

import os
import socket
import threading
import time

import pytest
import redis
from django.conf import settings
from redis.backoff import NoBackoff
from redis.retry import Retry
from rest_framework.test import APIClient

from scheduler import wake, wake_sender
from scheduler.cycle import run_cycle
from scheduler.models import Job

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def in_background(settings):
    settings.ROTA_WAKE_IN_BACKGROUND = True
    yield
    assert wake_sender.flush(10), "the sender was left busy"


@pytest.fixture
def broker():
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete(wake.CYCLE_WANTED, "celery", *client.keys("rota:node:*"))
    return client


def _submit(client) -> int:
    answer = client.post("/api/v1/jobs/", {"name": "j", "gpu_model": "h100-80gb", "command": "true"}, format="json")
    assert answer.status_code == 201, answer.content
    return answer.json()["id"]


@pytest.fixture
def alice_client(alice):
    client = APIClient()
    client.force_authenticate(alice)
    return client


def test_a_submit_s_wakeup_is_sent_by_the_sender_thread(alice_client, cluster, broker, monkeypatch,
                                                        django_capture_on_commit_callbacks):
    sent_by = []
    deliver = wake_sender.deliver
    monkeypatch.setattr(wake_sender, "deliver",
                        lambda wakeups: sent_by.append(threading.current_thread().name) or deliver(wakeups))
    with django_capture_on_commit_callbacks(execute=True):
        _submit(alice_client)
    assert wake_sender.flush(5)
    assert sent_by == ["rota-wake-sender"]
    assert wake.cycle_requested() and broker.llen("celery") == 1
    run_cycle()
    assert not wake.cycle_requested()


def test_wakeups_that_come_while_the_sender_is_busy_go_as_one_round(alice_client, cluster, broker, monkeypatch,
                                                                     django_capture_on_commit_callbacks):
    rounds, busy = [], threading.Event()
    deliver = wake_sender.deliver

    def held_first_round(wakeups):
        rounds.append(wakeups)
        if len(rounds) == 1:
            busy.wait(10)
        deliver(wakeups)

    monkeypatch.setattr(wake_sender, "deliver", held_first_round)
    h100, a100 = cluster["nodes"]
    with django_capture_on_commit_callbacks(execute=True):
        _submit(alice_client)
    for _ in range(4):
        with django_capture_on_commit_callbacks(execute=True):
            _submit(alice_client)
            wake.nodes_notify([h100.pk])
    with django_capture_on_commit_callbacks(execute=True):
        wake.nodes_notify([a100.pk])
    busy.set()
    assert wake_sender.flush(5)
    assert len(rounds) == 2
    assert rounds[1] == wake_sender.Wakeups(cycle=True, node_keys={wake.NODE_NEWS.format(n.pk) for n in (h100, a100)})
    assert broker.llen("celery") == 1  # the second round found the flag up: no second message
    assert wake.node_wait(h100.pk, 0) and wake.node_wait(a100.pk, 0)


@pytest.fixture
def silent_redis():
    """A Redis that accepts connections and never answers."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        accepted = []

        def accept():
            try:
                while True:
                    accepted.append(server.accept())
            except OSError:  # closed at the end of the test
                pass

        threading.Thread(target=accept, daemon=True).start()
        yield redis.Redis(host="127.0.0.1", port=server.getsockname()[1], socket_connect_timeout=1, socket_timeout=3,
                          retry=Retry(NoBackoff(), 0))  # one timeout, not redis-py's retries of it
        for conn, _addr in accepted:
            conn.close()


def test_a_submit_answers_at_once_when_redis_does_not(alice_client, cluster, broker, monkeypatch, silent_redis,
                                                      django_capture_on_commit_callbacks, caplog):
    monkeypatch.setattr(wake, "_client", lambda: silent_redis)
    started = time.monotonic()
    with django_capture_on_commit_callbacks(execute=True):
        job_id = _submit(alice_client)
    assert time.monotonic() - started < 2  # the sender waits out the 3 s socket timeout, not the request
    assert Job.objects.get(pk=job_id).state == "pending"
    assert not wake_sender.flush(0.5)  # still waiting on the silent Redis
    assert wake_sender.flush(10)
    assert "wake-up rota:cycle:wanted not sent" in caplog.text  # logged; the message still went (flag unknown)
    assert broker.llen("celery") == 1


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_forked_child_starts_its_own_sender(broker):
    wake_sender.send(cycle=True)
    assert wake_sender.flush(5)
    parent = wake_sender.sender()
    broker.delete(wake.CYCLE_WANTED)
    pid = os.fork()
    if pid == 0:  # the child: the parent's thread is gone, the wake-up must still go
        ok = False
        try:
            wake_sender.send(node_keys=("rota:node:forked:news",))
            ok = wake_sender.flush(5) and wake_sender.sender() is not parent
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert broker.lpop("rota:node:forked:news") is not None
    assert wake_sender.sender() is parent
