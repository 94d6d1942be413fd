"""What the node API accepts from an engine bridge: labels and the engine's word on the node's state."""

import pytest

from scheduler.models import Node
from scheduler.services.nodes import node_set_state

pytestmark = pytest.mark.django_db

REPORT = {"cpus": 8, "memory_mb": 1000, "gpu_backend": "slurm",
          "gpus": [{"index": 0, "uuid": "SLURM-node-h100-h100-0", "model": "h100-80gb", "memory_mb": 81559}]}


def test_labels_replace_the_nodes_labels_and_their_absence_keeps_them(cluster, node_client):
    client, node = node_client(), cluster["nodes"][0]
    Node.objects.filter(pk=node.pk).update(labels={"network": "ib"})
    client.post("/api/v1/node/register/", REPORT, format="json")
    node.refresh_from_db()
    assert node.labels == {"network": "ib"}
    client.post("/api/v1/node/register/", {**REPORT, "labels": {"nvme": "true"}}, format="json")
    node.refresh_from_db()
    assert node.labels == {"nvme": "true"}


def test_bad_labels_and_engine_states_are_named_and_nothing_is_written(cluster, node_client):
    client, node = node_client(), cluster["nodes"][0]
    response = client.post("/api/v1/node/register/", {**REPORT, "labels": {"Bad Key": "x"}}, format="json")
    assert response.status_code == 400 and "labels" in response.json()["errors"], response.json()
    response = client.post("/api/v1/node/register/", {**REPORT, "labels": {f"k{i}": "v" for i in range(65)}},
                           format="json")
    assert response.status_code == 400 and "at most 64 labels" in str(response.json()), response.json()
    response = client.post("/api/v1/node/heartbeat/", {"seq": 1, "engine": {"name": "slurm", "state": "gone"}},
                           format="json")
    assert response.status_code == 400 and "engine" in response.json()["errors"], response.json()
    node.refresh_from_db()
    assert node.heartbeat_seq == 0 and node.registered_at is None


def test_an_engine_drain_does_not_undo_a_drain_made_by_an_admin(cluster, node_client, staff):
    client, node = node_client(), cluster["nodes"][0]
    node_set_state(node=node, state=Node.DRAINING, reason="bad cable", user=staff)
    answer = client.post("/api/v1/node/heartbeat/", {"seq": 1, "engine": {"name": "slurm", "state": "drained",
                                                                           "reason": "fan"}}, format="json").json()
    assert answer["node_state"] == {"state": "draining", "reason": "bad cable", "set_by_engine": False}
    answer = client.post("/api/v1/node/heartbeat/", {"seq": 2, "engine": {"name": "slurm", "state": "ready"}},
                         format="json").json()
    node.refresh_from_db()
    assert (node.state, node.state_reason, node.state_changed_by) == (Node.DRAINING, "bad cable", staff)


def test_an_agent_without_an_engine_gets_the_answer_it_always_got(cluster, node_client):
    answer = node_client().post("/api/v1/node/heartbeat/", {"seq": 1}, format="json").json()
    assert set(answer) == {"heartbeat_interval_s", "heartbeat_timeout_s", "as_of", "assignments"}  # no node_state
