"""The heartbeat cadence grows with the fleet (scheduler/services/node_cadence.py): each node is told its interval
and timeout, and is judged down by the deadline it was told, also after the fleet shrank."""

import time
from datetime import timedelta

import pytest

from scheduler.models import Node
from scheduler.services import node_cadence
from scheduler.services.common import db_now
from scheduler.services.node_jobs import nodes_check_liveness
from tests.factories import NodeFactory
from tests.scheduler.test_node_api import H100_REPORT

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def budget(settings):
    """A budget of one heartbeat a second: 14 nodes in service heartbeat every 14 s, with a 42 s timeout."""
    settings.ROTA_NODE_HEARTBEAT_INTERVAL_S = 2
    settings.ROTA_NODE_HEARTBEAT_TIMEOUT_S = 30
    settings.ROTA_NODE_HEARTBEATS_PER_S = 1
    settings.ROTA_NODE_HEARTBEAT_INTERVAL_MAX_S = 60
    node_cadence.forget_count()
    yield
    node_cadence.forget_count()  # the next test counts its own fleet


def grow(cluster, to: int) -> list[Node]:
    """Nodes in service up to ``to`` (the cluster has two), and two down ones that do not count."""
    added = [NodeFactory(name=f"extra-{i:02d}", pool=cluster["pool"]) for i in range(to - 2)]
    NodeFactory(name="gone-1", pool=cluster["pool"], state=Node.DOWN)
    NodeFactory(name="gone-2", pool=cluster["pool"], state=Node.DOWN)
    node_cadence.forget_count()
    return added


def silent_for(node: Node, seconds: float) -> None:
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=db_now() - timedelta(seconds=seconds))


def test_the_interval_grows_with_the_nodes_in_service_up_to_the_maximum(cluster, settings):
    assert node_cadence.cadence() == {"heartbeat_interval_s": 2, "heartbeat_timeout_s": 30}  # 2 nodes
    grow(cluster, 14)
    assert node_cadence.cadence() == {"heartbeat_interval_s": 14, "heartbeat_timeout_s": 42}
    settings.ROTA_NODE_HEARTBEAT_INTERVAL_MAX_S = 10
    assert node_cadence.cadence() == {"heartbeat_interval_s": 10, "heartbeat_timeout_s": 30}
    settings.ROTA_NODE_HEARTBEAT_INTERVAL_MAX_S = 1  # below the interval setting: caps nothing
    assert node_cadence.cadence() == {"heartbeat_interval_s": 2, "heartbeat_timeout_s": 30}


def test_the_count_is_not_a_query_per_heartbeat(cluster, django_assert_num_queries):
    node_cadence.heartbeat_interval_s()
    for i in range(12):
        NodeFactory(name=f"extra-{i:02d}", pool=cluster["pool"])
    with django_assert_num_queries(0):
        assert node_cadence.heartbeat_interval_s() == 2  # counted a moment ago: the count is reused
    node_cadence.forget_count()
    assert node_cadence.heartbeat_interval_s() == 14


def test_register_and_heartbeat_answers_name_the_interval_and_timeout_and_the_node_keeps_them(
        cluster, node_client):
    grow(cluster, 14)
    node = cluster["nodes"][0]
    client = node_client(node)
    answer = client.post("/api/v1/node/register/", H100_REPORT, format="json").json()
    assert (answer["heartbeat_interval_s"], answer["heartbeat_timeout_s"]) == (14, 42)
    answer = client.post("/api/v1/node/heartbeat/", {"seq": 1}, format="json").json()
    assert (answer["heartbeat_interval_s"], answer["heartbeat_timeout_s"]) == (14, 42)
    node.refresh_from_db()
    assert (node.heartbeat_interval_s, node.heartbeat_timeout_s) == (14, 42)
    shown = node_client(node).get("/api/v1/nodes/")  # a node cannot read the user API
    assert shown.status_code in (401, 403)


def test_a_node_is_down_only_past_the_deadline_it_was_told(cluster, node_client):
    grow(cluster, 14)
    node = cluster["nodes"][0]
    client = node_client(node)
    client.post("/api/v1/node/register/", H100_REPORT, format="json")
    client.post("/api/v1/node/heartbeat/", {"seq": 1}, format="json")
    silent_for(node, 36)  # past the 30 s setting, within the 42 s it was told
    assert node.name not in nodes_check_liveness()
    silent_for(node, 43)
    assert node.name in nodes_check_liveness()
    node.refresh_from_db()
    assert node.state == Node.DOWN
    assert node.state_reason == "no heartbeat for 42s (told to heartbeat every 14s)"


def test_a_node_keeps_its_deadline_when_the_fleet_shrinks_under_it(cluster, node_client):
    extra = grow(cluster, 14)
    node, other = cluster["nodes"]
    client = node_client(node)
    client.post("/api/v1/node/register/", H100_REPORT, format="json")
    client.post("/api/v1/node/heartbeat/", {"seq": 1}, format="json")  # told: every 14 s, down after 42 s
    Node.objects.filter(pk__in=[n.pk for n in extra]).update(state=Node.DOWN)  # the fleet shrinks to two
    node_cadence.forget_count()
    answer = node_client(other).post("/api/v1/node/heartbeat/", {"seq": 1}, format="json").json()
    assert (answer["heartbeat_interval_s"], answer["heartbeat_timeout_s"]) == (2, 30)
    silent_for(node, 36)  # a silence the others' new 30 s timeout would not allow, but node's 42 s does
    assert nodes_check_liveness() == []
    silent_for(node, 43)
    assert nodes_check_liveness() == [node.name]


def test_a_node_never_told_a_timeout_is_judged_by_the_setting(cluster):
    node = cluster["nodes"][0]
    silent_for(node, 29)
    assert nodes_check_liveness() == []
    silent_for(node, 31)
    assert node.name in nodes_check_liveness()
    node.refresh_from_db()
    assert node.state_reason == "no heartbeat for 30s"


def test_the_long_poll_is_held_up_to_the_nodes_interval(cluster, node_client, settings):
    settings.ROTA_NODE_HEARTBEAT_INTERVAL_S = 1
    grow(cluster, 3)  # one heartbeat a second: 3 nodes heartbeat every 3 s
    started = time.monotonic()
    answer = node_client(cluster["nodes"][0]).post("/api/v1/node/wait/", {"timeout_s": 60}, format="json")
    assert answer.json() == {"news": False, "waited": True}
    assert 2.7 < time.monotonic() - started < 8  # the node's 3 s, not the 1 s setting nor the 60 s asked
