"""The team and queue endpoints of the REST API: members and templates (team-admins manage, members read
templates, outsiders 404), the admin queue and priority-class changes (platform admins only)."""

import pytest

from portal.models import AuditEntry, Membership
from scheduler.models import Job, JobTemplate
from scheduler.services.jobs import job_submit
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def victor(cluster):
    user = UserFactory(username="victor")
    MembershipFactory(user=user, team=cluster["vision"], role=Membership.TEAM_ADMIN)
    return user


def test_team_admins_list_add_and_remove_members(api, victor, alice, charlie):
    client = api(victor)
    assert {m["username"] for m in client.get("/api/v1/teams/vision/members/").json()} == {"victor", "alice"}
    response = client.post("/api/v1/teams/vision/members/", {"username": "charlie", "role": "member"}, format="json")
    assert response.status_code == 200 and response.json()["role"] == "member"
    assert client.delete("/api/v1/teams/vision/members/charlie/").status_code == 204
    assert [e.action for e in AuditEntry.objects.order_by("id")] == ["membership.create", "membership.delete"]


def test_member_endpoints_refuse_members_and_hide_the_team_from_outsiders(api, alice, charlie):
    for user, code in ((alice, 403), (charlie, 404)):  # alice is a member of vision, charlie is not
        assert api(user).get("/api/v1/teams/vision/members/").status_code == code
        join = {"username": "charlie"}
        assert api(user).post("/api/v1/teams/vision/members/", join, format="json").status_code == code
        assert api(user).delete("/api/v1/teams/vision/members/alice/").status_code == code
    assert "only team-admins of vision" in api(alice).get("/api/v1/teams/vision/members/").json()["detail"]
    assert Membership.objects.filter(user=alice).exists()


def test_a_bad_member_request_names_the_field(api, victor):
    body = api(victor).post("/api/v1/teams/vision/members/", {"username": "ghost", "role": "owner"},
                            format="json").json()
    assert "role" in body["errors"]
    body = api(victor).post("/api/v1/teams/vision/members/", {"username": "ghost"}, format="json").json()
    assert "no user named" in body["errors"]["username"][0]


def test_templates_are_saved_by_team_admins_and_read_by_members(api, victor, alice, charlie):
    payload = {"name": "quick", "kind": "evaluation", "values": {"command": "python eval.py", "gpus": 1}}
    response = api(victor).post("/api/v1/teams/vision/templates/", payload, format="json")
    assert response.status_code == 201
    template_id = response.json()["id"]
    listed = api(alice).get("/api/v1/teams/vision/templates/").json()
    assert listed[0]["name"] == "quick" and listed[0]["values"]["command"] == "python eval.py"
    assert api(alice).post("/api/v1/teams/vision/templates/", payload, format="json").status_code == 403
    assert api(alice).delete(f"/api/v1/teams/vision/templates/{template_id}/").status_code == 403
    assert api(charlie).get("/api/v1/teams/vision/templates/").status_code == 404
    assert api(charlie).delete(f"/api/v1/teams/vision/templates/{template_id}/").status_code == 404
    assert api(charlie).delete(f"/api/v1/teams/nlp/templates/{template_id}/").status_code == 404
    assert api(victor).delete(f"/api/v1/teams/vision/templates/{template_id}/").status_code == 204
    assert not JobTemplate.objects.exists()


def test_template_values_are_checked(api, victor):
    bad = {"name": "x", "kind": "training", "values": {"team": "nlp", "gpus": {"n": 1}}}
    body = api(victor).post("/api/v1/teams/vision/templates/", bad, format="json").json()
    assert "unknown fields team" in body["errors"]["values"][0]


def test_the_queue_api_is_for_platform_admins(api, alice):
    job_submit(user=alice, name="waits", command="true", gpu_model="h100-80gb")
    staff = UserFactory(username="root", is_staff=True)
    assert api(alice).get("/api/v1/queue/").status_code == 403
    body = api(staff).get("/api/v1/queue/?pool=train").json()
    assert body[0]["pool"] == "train" and body[0]["jobs"][0]["name"] == "waits" and body[0]["total"] == 1


def test_platform_admins_change_a_waiting_jobs_priority_class(api, alice):
    job = job_submit(user=alice, name="waits", command="true", gpu_model="h100-80gb")
    staff = UserFactory(username="root", is_staff=True)
    url = f"/api/v1/jobs/{job.pk}/priority-class/"
    assert api(alice).post(url, {"priority_class": "interactive"}, format="json").status_code == 403
    assert api(staff).post(url, {"priority_class": "nope"}, format="json").status_code == 400
    response = api(staff).post(url, {"priority_class": "interactive", "reason": "demo"}, format="json")
    assert response.status_code == 200 and response.json()["priority_class"] == "interactive"
    Job.objects.filter(pk=job.pk).update(state="running")
    body = api(staff).post(url, {"priority_class": "batch"}, format="json").json()
    assert "only a pending or held job" in body["errors"]["state"][0]
    assert Job.objects.get(pk=job.pk).priority_class.name == "interactive"


def test_a_template_value_the_submit_form_would_refuse_is_refused_and_nothing_saved(api, victor):
    client = api(victor)
    for values, field in (({"command": "x" * 10001}, "command"), ({"gpus": -5}, "gpus"),
                          ({"gpu_model": "nosuch"}, "gpu_model"), ({"command": "a\u0000"}, "command"),
                          ({"node_labels": "zone"}, "node_labels")):
        response = client.post("/api/v1/teams/vision/templates/", {"name": "t", "kind": "training", "values": values},
                               format="json")
        assert response.status_code == 400, (values, response.json())
        assert f"{field}:" in str(response.json()["errors"]["values"]), response.json()
    assert client.get("/api/v1/teams/vision/templates/").json() == []
