"""Stored structures are shown to people as fields, never as Python reprs: the audit log and what-if changes."""

import pytest
from django.template import Context, Template

from portal.audit import audit_record
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def render(value) -> str:
    return Template("{% load rota_format %}{{ value|fields }}").render(Context({"value": value}))


def test_fields_renders_one_escaped_line_per_key_and_json_for_nested_values():
    assert render({"team": "vision", "limit": "2", "nested": {"b": 1, "a": None}, "ok": True}) == (
        "<b>team</b>: vision<br><b>limit</b>: 2<br><b>nested</b>: {&quot;a&quot;: null, &quot;b&quot;: 1}"
        "<br><b>ok</b>: yes")
    assert render({"x": "<script>"}) == "<b>x</b>: &lt;script&gt;"
    assert render(None) == render({}) == "–"
    assert render([{"a": 1}, "b"]) == "<b>a</b>: 1<br>b"


def test_the_audit_log_shows_changes_as_fields(client):
    admin = UserFactory(username="root", is_staff=True)
    audit_record(actor=admin, action="quota.update", object_type="quota", object_id=1, object_name="vision/h100",
                 before={"limit": "2"}, after={"limit": "4", "weight": "1"}, reason="more")
    client.force_login(admin)
    page = client.get("/govern/audit/").content.decode()
    assert "<b>limit</b>: 2" in page and "<b>limit</b>: 4<br><b>weight</b>: 1" in page
    assert "{&#x27;limit&#x27;" not in page and "{'limit'" not in page
