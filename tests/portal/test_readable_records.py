"""Stored structures are shown to people as fields, never as Python reprs: the audit log and what-if changes."""

import pytest
from django.template import Context, Template

from portal.audit import audit_record
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def render(value) -> str:
    return Template("{% load rota_format %}{{ value|fields }}").render(Context({"value": value}))


def test_fields_renders_one_escaped_line_per_key_and_words_for_nested_values():
    assert render({"team": "vision", "limit": "2", "nested": {"b": 1, "a": None}, "ok": True}) == (
        "<b>team</b>: vision<br><b>limit</b>: 2<br><b>nested</b>: b 1, a none<br><b>ok</b>: yes")
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


def test_fields_puts_the_keys_people_look_for_first_and_writes_numbers_as_people_do():
    """jsonb hands keys back in its own order (limit, team, weight, …) and decimals as stored ("2.500")."""
    stored = {"limit": "4.000", "team": "vision", "weight": "1.000", "gpu_model": "h100-80gb", "guaranteed": "2.500"}
    assert render(stored) == ("<b>team</b>: vision<br><b>gpu model</b>: h100-80gb<br><b>guaranteed</b>: 2.5"
                              "<br><b>limit</b>: 4<br><b>weight</b>: 1")
    changes = {"quotas": [{"limit": 6.0, "team": "vision", "gpu_model": "h100-80gb"}], "priorities": {"batch": 350},
               "pool_scale": {}}
    assert render(changes) == ("<b>quotas</b>: team vision, gpu model h100-80gb, limit 6<br>"
                               "<b>priorities</b>: batch 350<br><b>pool scale</b>: none")
