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


def test_rotate_with_a_grace_period_keeps_the_old_token_working_until_it_runs_out(cluster):
    from datetime import timedelta

    from django.utils import timezone

    first = issue("issue", "node-h100")
    Node.objects.filter(name="node-h100").update(state=Node.READY)
    second = issue("rotate", "node-h100", "--grace", "600")
    assert heartbeat(first, seq=1) == 200 and heartbeat(second, seq=2) == 200
    out = StringIO()
    call_command("node_token", "list", stdout=out)
    assert "active until" in out.getvalue()
    NodeToken.objects.filter(token_hash=hash_token(first)).update(revoked_at=timezone.now() - timedelta(seconds=1))
    assert heartbeat(first, seq=3) == 401 and heartbeat(second, seq=4) == 200
    with pytest.raises(CommandError, match="between 0 and"):
        issue("rotate", "node-h100", "--grace", "-5")


def test_issue_refuses_a_second_token_and_a_pool_the_node_is_not_in(cluster):
    issue("issue", "node-h100")
    with pytest.raises(CommandError, match="already has an active token: use rotate"):
        issue("issue", "node-h100")
    assert NodeToken.objects.filter(node__name="node-h100").count() == 1
    with pytest.raises(CommandError, match="exists in pool train; --pool only applies"):
        issue("rotate", "node-h100", "--pool", "elsewhere")


def test_a_token_written_to_a_file_is_readable_by_its_owner_only_and_every_change_is_audited(cluster, tmp_path):
    from portal.models import AuditEntry

    path = tmp_path / "node.token"
    path.write_text("old")
    path.chmod(0o644)
    assert issue("issue", "gpu-new-02", "--pool", "train", "--output", str(path), "--reason", "rack 7") == ""
    raw = path.read_text().strip()
    assert raw.startswith("rn_") and path.stat().st_mode & 0o777 == 0o600
    assert NodeToken.objects.get(node__name="gpu-new-02").token_hash == hash_token(raw)
    issue("revoke", "gpu-new-02")
    entries = list(AuditEntry.objects.filter(object_type="node").order_by("id"))
    assert [e.action for e in entries] == ["node-token.issue", "node-token.revoke"]
    assert entries[0].after["node_created_in_pool"] == "train" and entries[0].reason == "rack 7"
    assert entries[0].actor_name.startswith("manage.py node_token (") and raw[3:11] in entries[0].after["token"]


def test_the_django_admin_cannot_add_or_unrevoke_tokens(cluster, client):
    from tests.factories import UserFactory

    raw = issue("issue", "node-h100")
    issue("revoke", "node-h100")
    token = NodeToken.objects.get()
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    assert client.get("/admin/scheduler/nodetoken/add/").status_code == 403
    response = client.post(f"/admin/scheduler/nodetoken/{token.pk}/change/",
                           {"node": token.node_id, "revoked_at_0": "", "revoked_at_1": ""})
    assert response.status_code == 403
    assert heartbeat(raw) == 401


def test_a_second_rotation_never_lengthens_an_old_tokens_grace(cluster):
    issue("issue", "node-h100")
    issue("rotate", "node-h100", "--grace", "3600")
    first = NodeToken.objects.order_by("created_at").first()
    deadline = first.revoked_at
    issue("rotate", "node-h100", "--grace", "604800")
    first.refresh_from_db()
    assert first.revoked_at == deadline, "still an hour, not a week"
    issue("rotate", "node-h100")  # no grace: every old token stops now
    first.refresh_from_db()
    assert first.revoked_at < deadline
