"""Node tokens: issued by admins, stored hashed, rotatable and revocable; the old one stops working."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from scheduler.models import Node, NodeToken
from scheduler.models.cluster import hash_token

pytestmark = pytest.mark.django_db


def issue(*args) -> str:
    out = StringIO()
    call_command("node_token", *args, stdout=out, stderr=StringIO())
    return out.getvalue().strip()


def heartbeat(raw: str, seq: int = 1) -> int:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Node {raw}")
    return client.post("/api/v1/node/heartbeat/", {"seq": seq}, format="json").status_code


def test_issue_creates_the_node_and_stores_only_a_hash(cluster):
    raw = issue("issue", "gpu-new-01", "--pool", "train")
    node = Node.objects.get(name="gpu-new-01")
    token = NodeToken.objects.get(node=node)
    assert token.token_hash == hash_token(raw) and raw not in token.token_hash
    Node.objects.filter(pk=node.pk).update(state=Node.READY)
    assert heartbeat(raw) == 200


def test_rotate_revokes_the_old_token_at_once(cluster):
    first = issue("issue", "node-h100")
    Node.objects.filter(name="node-h100").update(state=Node.READY)
    second = issue("rotate", "node-h100")
    assert heartbeat(first) == 401
    assert heartbeat(second) == 200


def test_revoke_locks_the_node_out(cluster):
    raw = issue("issue", "node-h100")
    issue("revoke", "node-h100")
    assert heartbeat(raw) == 401


def test_bad_requests_say_what_is_wrong(cluster):
    with pytest.raises(CommandError, match="no node named"):
        issue("rotate", "ghost")
    with pytest.raises(CommandError, match="no pool named"):
        issue("issue", "ghost", "--pool", "nowhere")
