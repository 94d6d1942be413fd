"""Restricted priority classes: only the teams a platform admin granted one may submit with it (the way a
Slurm QOS is allowed per account), on every path a job is submitted by, and members see what they may use."""

import re

import pytest
from django.test import Client

from portal.models import AuditEntry
from scheduler.models import Job, PriorityClass
from scheduler.services.quote import job_quote

pytestmark = pytest.mark.django_db

VALID = {"name": "serve", "command": "python serve.py", "gpus": 1, "gpu_model": "a100-40gb"}


@pytest.fixture
def serving(cluster):
    """production-inference is restricted to nlp."""
    pc = PriorityClass.objects.get(name="production-inference")
    pc.restricted = True
    pc.save()
    pc.teams.add(cluster["nlp"])
    return pc


def client_for(user):
    client = Client()
    client.force_login(user)
    return client


def test_a_team_not_granted_a_restricted_class_is_refused_and_told_what_it_may_use(api, alice, serving):
    response = api(alice).post("/api/v1/jobs/", {**VALID, "priority_class": "production-inference"}, format="json")
    assert response.status_code == 400
    assert response.json()["errors"]["priority_class"] == [
        "priority class production-inference is restricted to the teams a platform admin granted it; "
        "team vision may use: interactive, training, batch"]
    assert not Job.objects.exists()


def test_the_kinds_default_class_is_named_as_such_when_it_is_restricted(api, alice, serving):
    response = api(alice).post("/api/v1/jobs/", {**VALID, "kind": "inference"}, format="json")
    assert response.status_code == 400
    message = response.json()["errors"]["priority_class"][0]
    assert message.startswith("priority class production-inference (the default for kind inference) is restricted")
    chosen = api(alice).post("/api/v1/jobs/", {**VALID, "kind": "inference", "priority_class": "interactive"},
                             format="json")
    assert chosen.status_code == 201, chosen.json()


def test_a_granted_team_submits_with_it_and_unrestricted_classes_stay_open_to_all(api, alice, charlie, serving):
    granted = api(charlie).post("/api/v1/jobs/", {**VALID, "priority_class": "production-inference"}, format="json")
    assert granted.status_code == 201, granted.json()
    assert granted.json()["priority_class"] == "production-inference"
    open_class = api(alice).post("/api/v1/jobs/", {**VALID, "priority_class": "batch"}, format="json")
    assert open_class.status_code == 201, open_class.json()


def test_the_quote_and_the_browser_form_refuse_it_too(alice, serving):
    with pytest.raises(Exception, match="restricted to the teams a platform admin granted it"):
        job_quote(user=alice, **VALID, priority_class="production-inference")
    response = client_for(alice).post("/jobs/new/", {
        "team": "vision", "kind": "training", **VALID, "priority_class": "production-inference"})
    assert response.status_code == 200
    assert "restricted to the teams a platform admin granted it" in response.content.decode()
    assert not Job.objects.exists()


def test_the_submit_form_offers_a_restricted_class_to_granted_teams_only(alice, serving, cluster):
    page = client_for(alice).get("/jobs/new/").content.decode()
    teams_of = dict(re.findall(r'<option value="([a-z-]+)" data-teams="([^"]*)"', page))
    assert teams_of["production-inference"] == ""  # vision is not granted it: the page hides it
    assert teams_of["training"] == "vision"


def test_the_api_lists_which_of_your_teams_may_use_each_class(api, alice, charlie, serving):
    classes = {c["name"]: c for c in api(alice).get("/api/v1/priority-classes/").json()}
    assert classes["production-inference"]["restricted"] is True
    assert classes["production-inference"]["usable_by"] == []
    assert classes["training"]["usable_by"] == ["vision"]
    theirs = {c["name"]: c for c in api(charlie).get("/api/v1/priority-classes/").json()}
    assert theirs["production-inference"]["usable_by"] == ["nlp"]


def test_an_admin_restricts_a_class_and_grants_it_with_a_reason_and_it_is_audited(staff, cluster, api, alice):
    form = {"value": 500, "description": "", "preemptible": "on", "may_preempt": "on", "min_runtime_s": 0,
            "grace_period_s": 30, "restricted": "on", "teams": [cluster["nlp"].pk], "reason": "training is nlp's"}
    response = client_for(staff).post("/govern/priority-classes/training/", form)
    assert response.status_code == 302, response.content.decode()
    entry = AuditEntry.objects.get(object_type="priority-class")
    assert entry.before["restricted"] is False and entry.before["teams"] == []
    assert entry.after["restricted"] is True and entry.after["teams"] == ["nlp"]
    assert entry.reason == "training is nlp's"
    refused = api(alice).post("/api/v1/jobs/", {**VALID, "priority_class": "training"}, format="json")
    # Nearest in priority first: not the class that preempts everyone.
    assert refused.status_code == 400 and "team vision may use: batch, interactive, production-inference" in (
        refused.json()["errors"]["priority_class"][0])
    listing = client_for(staff).get("/govern/priority-classes/").content.decode()
    assert re.search(r"<td>training</td>.*?<td>nlp</td>", listing, re.S)
    assert "every team" in listing


def test_granting_teams_alone_is_a_change_that_needs_a_reason(staff, cluster, serving):
    form = {"value": 1000, "description": "", "preemptible": "", "may_preempt": "on", "min_runtime_s": 0,
            "grace_period_s": 30, "restricted": "on", "teams": [cluster["nlp"].pk, cluster["vision"].pk],
            "reason": ""}
    response = client_for(staff).post("/govern/priority-classes/production-inference/", form)
    assert response.status_code == 400 and "a reason is required" in response.content.decode()
    assert list(serving.teams.values_list("name", flat=True)) == ["nlp"]
    saved = client_for(staff).post("/govern/priority-classes/production-inference/", form | {"reason": "vision serves"})
    assert saved.status_code == 302
    assert sorted(serving.teams.values_list("name", flat=True)) == ["nlp", "vision"]


def test_a_template_may_not_save_a_class_its_team_is_not_granted_nor_rely_on_a_restricted_default(cluster, serving):
    from scheduler.forms import template_value_errors

    assert template_value_errors(cluster["vision"], {"priority_class": "production-inference"}) == {
        "priority_class": "priority class production-inference is restricted to the teams a platform admin granted "
                          "it; team vision may use: interactive, training, batch"}
    assert template_value_errors(cluster["nlp"], {"priority_class": "production-inference"}) == {}
    assert template_value_errors(cluster["vision"], {"priority_class": "batch"}) == {}
    blank = template_value_errors(cluster["vision"], {"priority_class": ""}, kind="inference")
    assert blank["priority_class"].startswith("priority class production-inference (the default for kind inference)")
    assert template_value_errors(cluster["vision"], {"priority_class": ""}, kind="training") == {}


def test_saving_a_class_no_team_may_use_or_ticks_that_do_nothing_warns_the_admin(staff, cluster):
    base = {"value": 1000, "description": "", "preemptible": "", "may_preempt": "on", "min_runtime_s": 0,
            "grace_period_s": 30, "reason": "lock down"}
    client = client_for(staff)
    page = client.post("/govern/priority-classes/production-inference/", base | {"restricted": "on"},
                       follow=True).content.decode()
    assert ("No team may submit with production-inference now: it is restricted and no team is ticked; it is the "
            "default of kind inference") in page
    page = client.post("/govern/priority-classes/production-inference/", base | {"teams": [cluster["nlp"].pk]},
                       follow=True).content.decode()
    assert "production-inference is open to every team: the ticked teams matter only once it is restricted" in page
    form = client.get("/govern/priority-classes/production-inference/").content.decode()
    assert "<legend>Teams granted this class</legend>" in form and 'for=""' not in form
