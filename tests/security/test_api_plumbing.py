"""Every answer under /api/ is JSON, errors included: a too deeply nested body is a 400, a too large one a 413,
a URL no route matches a 404, and a crash (DEBUG off) a 500; browser pages keep HTML."""

import json

import pytest
from django.test import Client

from portal.api import bad_request, permission_denied
from scheduler.models import Job

pytestmark = pytest.mark.django_db
DEEP = 100_000


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def assert_json(response, status: int) -> dict:
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"] == "application/json", response.content[:300]
    return response.json()


@pytest.mark.parametrize("path", [
    "/api/v1/jobs/",
    "/api/v1/jobs/quote/",
    "/api/v1/teams/vision/templates/",
    "/api/v1/auth/token/",
])
def test_a_body_nested_too_deeply_is_a_400_parse_error(client_for, path):
    body = '{"name": "deep", "command": "true", "env": ' + nested(DEEP) + "}"
    response = client_for("owner").post(path, body, content_type="application/json")
    assert "JSON parse error" in assert_json(response, 400)["detail"]
    assert not Job.objects.filter(name="deep").exists()


def test_a_node_report_nested_too_deeply_is_a_400_parse_error(world, client_for):
    body = '{"seq": 1, "gpus": ' + nested(DEEP) + "}"
    response = client_for("node").post("/api/v1/node/heartbeat/", body, content_type="application/json")
    assert "JSON parse error" in assert_json(response, 400)["detail"]


def test_a_quota_put_nested_too_deeply_is_a_400_parse_error(client_for):
    body = '{"quotas": ' + nested(DEEP) + "}"
    response = client_for("platform_admin").put("/api/v1/quotas/", body, content_type="application/json")
    assert "JSON parse error" in assert_json(response, 400)["detail"]


@pytest.mark.parametrize("debug", [False, True])
@pytest.mark.parametrize("content_type", ["application/json", "application/x-www-form-urlencoded"])
def test_a_body_over_the_upload_limit_is_a_413_saying_the_limit(client_for, settings, content_type, debug):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    settings.DEBUG = debug  # DEBUG on: Django would show its debug page, so DRF's exception handler answers
    fields = {"name": "big", "command": "x" * 2000, "gpu_model": "h100-80gb"}
    body = json.dumps(fields) if content_type == "application/json" else "&".join(f"{k}={v}" for k, v in fields.items())
    response = client_for("owner").post("/api/v1/jobs/", body, content_type=content_type)
    assert assert_json(response, 413)["detail"] == "request body too large: at most 1000 bytes are accepted"
    assert not Job.objects.filter(name="big").exists()


def test_a_too_large_token_request_is_a_413_too(client_for, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    body = json.dumps({"username": "alice", "password": "x" * 2000})
    response = client_for("anonymous").post("/api/v1/auth/token/", body, content_type="application/json")
    assert "1000 bytes" in assert_json(response, 413)["detail"]


def test_too_many_form_fields_is_a_json_400(client_for, settings):
    settings.DATA_UPLOAD_MAX_NUMBER_FIELDS = 5
    body = "&".join(f"f{i}=1" for i in range(10))
    response = client_for("owner").post("/api/v1/jobs/", body, content_type="application/x-www-form-urlencoded")
    assert assert_json(response, 400) == {"detail": "Bad request."}


def test_a_too_large_form_on_a_page_is_a_readable_413(client_for, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    response = client_for("owner").post("/jobs/new/", {"team": "vision", "name": "big", "command": "x" * 2000})
    assert response.status_code == 413 and response["Content-Type"].startswith("text/html")
    assert b"at most 1000 bytes" in response.content
    assert not Job.objects.filter(name="big").exists()


@pytest.mark.parametrize(("method", "path"), [
    ("post", "/api/v1/jobs/abc/cancel/"),
    ("get", "/api/v1/jobs/abc/"),
    ("get", "/api/v1/teams/vision/templates/abc/"),
    ("post", "/api/v1/jobs/1.5/priority-class/"),
    ("get", "/api/v1/no-such-endpoint/"),
    ("get", "/api/v2/jobs/"),
])
def test_a_url_no_route_matches_is_a_json_404_under_the_api(client_for, method, path):
    response = getattr(client_for("owner"), method)(path)
    assert assert_json(response, 404) == {"detail": "Not found."}


def test_a_missing_page_keeps_the_html_404(client_for):
    response = client_for("owner").get("/jobs/abc/")
    assert response.status_code == 404 and response["Content-Type"].startswith("text/html")


def boom(*args, **kwargs):
    raise RuntimeError("a bug")


def test_a_crash_in_the_api_is_a_json_500_with_debug_off(world, settings, monkeypatch):
    settings.DEBUG = False
    monkeypatch.setattr("accounting.api.rated_usage", boom)
    client = Client(raise_request_exception=False)
    client.force_login(world["users"]["owner"])
    response = client.get("/api/v1/usage/", {"start": "2026-11-01", "end": "2026-11-30"})
    body = assert_json(response, 500)
    assert body == {"detail": "A server error occurred."}  # no traceback, no exception text


def test_a_crash_on_a_page_keeps_the_html_500(world, settings, monkeypatch):
    settings.DEBUG = False
    monkeypatch.setattr("accounting.views.rated_usage", boom)
    client = Client(raise_request_exception=False)
    client.force_login(world["users"]["owner"])
    response = client.get("/accounting/")
    assert response.status_code == 500 and response["Content-Type"].startswith("text/html")


@pytest.mark.parametrize(("handler", "status"), [(bad_request, 400), (permission_denied, 403)])
def test_the_other_error_handlers_answer_json_under_the_api_and_html_elsewhere(rf, handler, status):
    answer = handler(rf.get("/api/v1/jobs/"), Exception())
    assert answer.status_code == status and answer["Content-Type"] == "application/json"
    assert "detail" in json.loads(answer.content)
    page = handler(rf.get("/jobs/"), Exception())
    assert page.status_code == status and page["Content-Type"].startswith("text/html")


@pytest.mark.parametrize("url", [
    "/api/v1/usage/?start=2026-11-01&end=2026-11-30&team=vision%00",
    "/api/v1/reports/chargeback/?month=2026-11&format=csv&team=vision%00",
    "/api/v1/jobs/?state=pend%00ing",
    "/api/v1/jobs/?te%00am=vision",
])
def test_a_nul_character_in_a_query_parameter_is_a_400_naming_it(client_for, url):
    body = assert_json(client_for("owner").get(url), 400)
    assert list(body["errors"].values()) == [["must not contain a NUL character"]]
    assert body["detail"].startswith("invalid input: ")


def test_a_nul_character_in_a_page_query_is_a_400_and_in_a_form_field_a_form_error(client_for, world):
    owner = client_for("owner")
    page = owner.get("/accounting/?team=vision%00")
    assert page.status_code == 400 and "team must not contain a NUL character" in page.content.decode()
    form = owner.post("/jobs/new/", {"team": "vision", "name": "nul\x00job", "command": "true"})
    assert form.status_code == 200 and "Null characters are not allowed" in form.content.decode()
    assert not Job.objects.filter(name__startswith="nul").exists()
