"""The policies API: the active policy for everyone signed in; every policy with its versions for platform
admins only; read-only; in the OpenAPI schema."""

import pytest

from scheduler.models import SchedulingPolicy
from scheduler.services.policies import policy_create, policy_version_create
from tests.scheduler.test_policies import knobs

pytestmark = pytest.mark.django_db


def test_everyone_signed_in_reads_the_active_policy(api, alice, staff):
    policy_version_create(user=staff, policy=SchedulingPolicy.objects.get(name="rota"),
                          values=knobs(placement="spread"), reason="spread")
    body = api(alice).get("/api/v1/policies/active/").json()
    assert (body["name"], body["version"], body["label"], body["placement"]) == ("rota", 2, "rota v2", "spread")
    assert body["fair_share_half_life_s"] == 604800.0 and body["las_thresholds_gpu_s"] == []
    assert body["since"] is not None
    assert api().get("/api/v1/policies/active/").status_code in (401, 403)


def test_admins_list_every_policy_with_its_versions(api, staff):
    policy_create(user=staff, name="tiresias", values=knobs(ordering="las", las_thresholds_gpu_s=[3600.0, 36000.0]),
                  reason="compare")
    body = api(staff).get("/api/v1/policies/").json()
    assert [(p["name"], p["active"], p["active_version"], p["current_version"]) for p in body] == [
        ("rota", True, 1, 1), ("tiresias", False, None, 1)]
    version = body[1]["versions"][0]
    assert (version["label"], version["ordering"], version["las_thresholds_gpu_s"]) == (
        "tiresias v1", "las", [3600.0, 36000.0])
    assert version["created_by"] == "root" and version["activations"] == []
    detail = api(staff).get("/api/v1/policies/rota/").json()
    assert detail["versions"][0]["activations"][0]["reason"] == "the built-in default"
    assert api(staff).get("/api/v1/policies/nope/").status_code == 404


def test_non_admins_may_not_list_policies_and_nobody_writes_through_the_api(api, alice, staff):
    assert api(alice).get("/api/v1/policies/").status_code == 403
    assert api(alice).get("/api/v1/policies/rota/").status_code == 403
    assert api(staff).post("/api/v1/policies/", {"name": "x"}, format="json").status_code == 405
    assert api(staff).put("/api/v1/policies/rota/", {}, format="json").status_code == 405


def test_the_schema_documents_the_policy_endpoints(api, alice):
    paths = api(alice).get("/api/schema/?format=json").json()["paths"]
    assert {"/api/v1/policies/", "/api/v1/policies/active/", "/api/v1/policies/{name}/"} <= set(paths)
