"""GET /api/v1/teams/ and GET|PUT /api/v1/quotas/: visibility through the access layer, PUT staff-only with the
page's validation, audit and optimistic concurrency."""

import pytest

from portal.models import AuditEntry
from scheduler.models import Quota

pytestmark = pytest.mark.django_db


def put(client, *cells, reason="api edit"):
    return client.put("/api/v1/quotas/", {"quotas": list(cells), "reason": reason}, format="json")


def current(cluster, team="vision", model="h100"):
    return Quota.objects.get(team=cluster[team], gpu_model=cluster[model])


def test_teams_lists_only_the_members_teams(api, alice, charlie, staff):
    assert [t["name"] for t in api(alice).get("/api/v1/teams/").json()] == ["vision"]
    assert [t["name"] for t in api(charlie).get("/api/v1/teams/").json()] == ["nlp"]
    assert [t["name"] for t in api(staff).get("/api/v1/teams/").json()] == ["nlp", "vision"]


def test_anonymous_clients_are_refused(api, cluster):
    assert api().get("/api/v1/teams/").status_code == 401
    assert api().get("/api/v1/quotas/").status_code == 401
    assert put(api(), {"team": "vision", "gpu_model": "h100-80gb", "guaranteed": 1}).status_code == 401


def test_quotas_lists_only_the_members_teams(api, alice, charlie, staff):
    body = api(alice).get("/api/v1/quotas/").json()
    assert {(q["team"], q["gpu_model"]) for q in body} == {("vision", "h100-80gb"), ("vision", "a100-40gb")}
    assert {q["team"] for q in api(charlie).get("/api/v1/quotas/").json()} == {"nlp"}
    assert len(api(staff).get("/api/v1/quotas/").json()) == 3
    assert set(body[0]) >= {"guaranteed", "limit", "weight", "updated_at"}


def test_members_may_not_put_quotas(api, alice, cluster):
    q = current(cluster)
    response = put(api(alice), {"team": "vision", "gpu_model": "h100-80gb", "guaranteed": 4, "limit": 8,
                                "updated_at": q.updated_at.isoformat()})
    assert response.status_code == 403
    assert current(cluster).guaranteed == 2 and not AuditEntry.objects.exists()


def test_staff_puts_quotas_and_it_is_audited(api, staff, cluster):
    q = current(cluster)
    response = put(api(staff), {"team": "vision", "gpu_model": "h100-80gb", "guaranteed": "3", "limit": "5",
                                "weight": "2", "updated_at": q.updated_at.isoformat()},
                   {"team": "nlp", "gpu_model": "a100-40gb", "guaranteed": "1", "limit": None})
    assert response.status_code == 200, response.json()
    q.refresh_from_db()
    assert (q.guaranteed, q.limit, q.weight) == (3, 5, 2)
    assert current(cluster, "nlp", "a100").limit is None
    entries = {e.object_name: e for e in AuditEntry.objects.all()}
    assert entries["vision/h100-80gb"].before["guaranteed"] == "2"
    assert entries["vision/h100-80gb"].after["guaranteed"] == "3"
    assert entries["nlp/a100-40gb"].action == "quota.create" and entries["nlp/a100-40gb"].reason == "api edit"


def test_put_refuses_inconsistent_quotas_naming_the_cell(api, staff, cluster):
    q = current(cluster)
    response = put(api(staff), {"team": "vision", "gpu_model": "h100-80gb", "guaranteed": 5, "limit": 4,
                                "updated_at": q.updated_at.isoformat()})
    assert response.status_code == 400
    assert set(response.json()["errors"]) == {"vision/h100-80gb.guaranteed"}  # the guarantee is what changed
    lowered = put(api(staff), {"team": "vision", "gpu_model": "h100-80gb", "guaranteed": 2, "limit": 1,
                               "updated_at": q.updated_at.isoformat()})
    assert lowered.json()["errors"] == {"vision/h100-80gb.limit": [
        "vision/h100-80gb: limit 1 is below the guaranteed 2; a limit must be ≥ the guarantee"]}
    unknown = put(api(staff), {"team": "nope", "gpu_model": "h100-80gb", "guaranteed": 1})
    assert unknown.status_code == 400 and "nope/h100-80gb.team" in unknown.json()["errors"]
    assert not AuditEntry.objects.exists()


def test_put_refuses_a_cell_given_twice_naming_it_and_writes_nothing(api, staff, cluster):
    stamp = current(cluster).updated_at.isoformat()
    response = put(api(staff), {"team": "nlp", "gpu_model": "a100-40gb", "guaranteed": 1},
                   {"team": "vision", "gpu_model": "h100-80gb", "guaranteed": 3, "limit": 4, "updated_at": stamp},
                   {"team": "vision", "gpu_model": "h100-80gb", "guaranteed": 1, "limit": 4, "updated_at": stamp})
    assert response.status_code == 400
    assert set(response.json()["errors"]) == {"vision/h100-80gb.cell"}
    assert "vision/h100-80gb appears 2 times" in response.json()["errors"]["vision/h100-80gb.cell"][0]
    assert current(cluster).guaranteed == 2 and not Quota.objects.filter(team=cluster["nlp"], gpu_model=cluster["a100"])
    assert not AuditEntry.objects.exists()


def test_put_refuses_a_per_pool_cell_rather_than_writing_it_to_every_pool(api, staff, cluster):
    q = current(cluster)
    response = put(api(staff), {"team": "vision", "gpu_model": "h100-80gb", "pool": "train", "guaranteed": 3,
                                "limit": 4, "updated_at": q.updated_at.isoformat()})
    assert response.status_code == 400
    assert "pool null" in response.json()["errors"]["quotas"]["0"]["pool"][0]
    assert current(cluster).guaranteed == 2
    listed = api(staff).get("/api/v1/quotas/").json()  # what GET lists (pool null) goes back as it is
    assert put(api(staff), *listed).status_code == 200


def test_put_refuses_a_stale_edit_with_409(api, staff, cluster):
    q = current(cluster)
    stamp = q.updated_at.isoformat()
    q.weight = 3
    q.save()
    response = put(api(staff), {"team": "vision", "gpu_model": "h100-80gb", "guaranteed": 4, "limit": 8,
                                "updated_at": stamp})
    assert response.status_code == 409
    assert response.json()["cells"] == ["vision/h100-80gb"]
    assert current(cluster).guaranteed == 2
    missing = put(api(staff), {"team": "vision", "gpu_model": "h100-80gb", "guaranteed": 4, "limit": 8})
    assert missing.status_code == 409  # an edit of an existing row must say which version it read
