"""A node's long-poll brings its assignments with the news when it asks (``"assignments": true``,
docs/node-protocol.md): what its next heartbeat would have taken delivery of, marked delivered as a heartbeat marks
them, stamped ``as_of`` so that the node applies its answers in the order the portal read them."""

import threading
from datetime import datetime, timedelta

import pytest
import redis
from django.conf import settings
from django.db import connection
from django.utils import timezone

from scheduler import wake
from scheduler.models import Job, JobTransition, Node, NodeToken
from tests.processes import wait_for
from tests.scheduler.test_node_api import H100_REPORT, admitted_job, beat

pytestmark = pytest.mark.django_db
WAIT = "/api/v1/node/wait/"


@pytest.fixture(autouse=True)
def _no_news_yet():
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete(*client.keys("rota:node:*") or ["-"])


def _registered(cluster, node_client):
    client = node_client()
    assert client.post("/api/v1/node/register/", H100_REPORT, format="json").status_code == 200
    return client, cluster["nodes"][0]


def _news_for(node) -> None:
    wake._push(wake.NODE_NEWS.format(node.pk))


def test_news_brings_what_the_heartbeat_would_have_delivered_marked_delivered(alice, cluster, node_client):
    client, node = _registered(cluster, node_client)
    job = admitted_job(alice, gpus=1)
    _news_for(node)
    answer = client.post(WAIT, {"timeout_s": 1, "assignments": True}, format="json").json()
    assert answer["news"] is True and answer["waited"] is True
    [assignment] = answer["assignments"]
    assert (assignment["job_id"], assignment["attempt"], assignment["desired"]) == (job.pk, 1, "running")
    assert assignment["command"] == "echo hi" and assignment["run_as"]["team"] == "vision"
    job.refresh_from_db()
    assert job.state == "starting"
    assert JobTransition.objects.filter(job=job, to_state="starting", cause=f"delivered to node {node.name}").exists()
    node.refresh_from_db()
    assert node.heartbeat_seq == 0  # a delivery is no heartbeat: liveness is the heartbeats' alone

    told = beat(client, 1).json()  # the heartbeat after it lists the same, read later
    assert [a["job_id"] for a in told["assignments"]] == [job.pk]
    assert datetime.fromisoformat(told["as_of"]) > datetime.fromisoformat(answer["as_of"])


def test_a_node_that_does_not_ask_gets_the_news_alone_and_its_heartbeat_delivers(alice, cluster, node_client):
    client, node = _registered(cluster, node_client)
    job = admitted_job(alice, gpus=1)
    _news_for(node)
    assert client.post(WAIT, {"timeout_s": 1}, format="json").json() == {"news": True, "waited": True}
    assert Job.objects.get(pk=job.pk).state == "admitted"
    assert [a["job_id"] for a in beat(client, 1).json()["assignments"]] == [job.pk]


def test_no_news_brings_nothing_and_a_down_node_gets_the_news_alone(alice, cluster, node_client):
    client, node = _registered(cluster, node_client)
    job = admitted_job(alice, gpus=1)
    assert client.post(WAIT, {"timeout_s": 0.05, "assignments": True}, format="json").json() == {
        "news": False, "waited": True}
    Node.objects.filter(pk=node.pk).update(state=Node.DOWN)  # after the wait was authorized: read at delivery
    _news_for(node)
    assert client.post(WAIT, {"timeout_s": 1, "assignments": True}, format="json").json() == {
        "news": True, "waited": True}
    assert Job.objects.get(pk=job.pk).state == "admitted"
    assert beat(client, 1).status_code == 409  # the heartbeat it sends for them tells it to register


def test_assignments_must_be_a_boolean(cluster, node_client):
    client, _node = _registered(cluster, node_client)
    answer = client.post(WAIT, {"timeout_s": 1, "assignments": "soon"}, format="json")
    assert answer.status_code == 400 and "assignments" in answer.json()["errors"]


def test_a_token_revoked_while_the_wait_was_held_gets_the_news_alone(alice, cluster, node_client):
    from scheduler.services import nodes

    client, node = _registered(cluster, node_client)
    job = admitted_job(alice, gpus=1)
    token = NodeToken.objects.get(node=node)
    NodeToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now() - timedelta(seconds=1))
    assert nodes.node_delivery(node=node, token_id=token.pk) is None  # the wait was authorized before this
    assert Job.objects.get(pk=job.pk).state == "admitted"
    assert beat(client, 1).status_code == 401


@pytest.mark.django_db(transaction=True)
def test_a_heartbeat_that_waited_for_a_deliverys_hold_on_the_node_is_stamped_after_it(
        alice, cluster, node_client, monkeypatch):
    """The heartbeat's UPDATE reads its written time before it waits for the row a delivery holds: its answer's
    stamp is read after (RETURNING), so the node, which applies only later stamps, keeps the newer answer."""
    from scheduler.services import nodes

    client, node = _registered(cluster, node_client)
    admitted_job(alice, gpus=1)
    token = NodeToken.objects.get(node=node)
    locked, go, real_now = threading.Event(), threading.Event(), nodes.db_now

    def held_then_now():
        if threading.current_thread().name == "delivery":  # the node's row is held: let the heartbeat queue
            locked.set()
            go.wait(10)
        return real_now()

    monkeypatch.setattr(nodes, "db_now", held_then_now)
    delivered, beaten = {}, {}

    def deliver():
        delivered.update(nodes.node_delivery(node=node, token_id=token.pk))
        connection.close()

    def heartbeat():
        beaten.update(beat(client, 1).json())
        connection.close()

    threads = [threading.Thread(target=deliver, name="delivery"), threading.Thread(target=heartbeat)]
    threads[0].start()
    assert locked.wait(10)
    threads[1].start()
    wait_for(lambda: _waiting_on_a_lock(), timeout=10, what="the heartbeat to wait for the node's row")
    go.set()
    for thread in threads:
        thread.join(15)
    assert datetime.fromisoformat(beaten["as_of"]) > datetime.fromisoformat(delivered["as_of"])


def _waiting_on_a_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                       "AND wait_event_type = 'Lock'")
        return cursor.fetchone()[0] > 0
