"""Govern -> Policies (no browser): admins list, create, tune and activate scheduling policies; each change says
why, lands in the audit log and is a new version; bad knobs are named on their field; others get 404."""

import pytest
from django.test import Client

from portal.models import AuditEntry
from scheduler.cycle import run_cycle
from scheduler.models import PolicyVersion, SchedulingPolicy
from scheduler.selectors_policies import policy_active

pytestmark = pytest.mark.django_db

FORM = {"ordering": "fairshare", "placement": "binpack", "backfill": "on", "preemption": "on",
        "preemption_scope": "team", "borrowing": "on", "reclaim": "on", "guarantee_first": "on",
        "fair_share_half_life_s": "604800", "las_thresholds_gpu_s": ""}


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_page_lists_the_policies_and_names_the_active_version(staff):
    page = client_for(staff).get("/govern/policies/")
    assert page.status_code == 200
    html = page.content.decode()
    assert '<strong id="active-policy">rota v1</strong>' in html
    assert 'href="/govern/policies/rota/"' in html and "binpack" in html
    assert 'value="7 days"' in html  # the new-policy form starts from the active version's values, in words
    assert "604800" not in html and ">7 days</td>" in html
    assert 'aria-current="page">Policies</a>' in html


def test_an_admin_creates_a_draft_policy_with_a_reason(staff):
    response = client_for(staff).post("/govern/policies/", {
        **FORM, "name": "spread-all", "description": "spread", "placement": "spread", "reason": "try it"})
    assert response.status_code == 302
    version = PolicyVersion.objects.get(policy__name="spread-all")
    assert (version.number, version.placement, version.created_by, version.reason) == (1, "spread", staff, "try it")
    assert policy_active().label == "rota v1"
    assert AuditEntry.objects.get().action == "policy.create"


def test_a_bad_knob_is_named_on_its_field_and_nothing_is_saved(staff):
    response = client_for(staff).post("/govern/policies/rota/", {
        **FORM, "ordering": "las", "las_thresholds_gpu_s": "36000, 3600", "fair_share_half_life_s": "-1",
        "reason": "tiresias-like"})
    assert response.status_code == 400
    html = response.content.decode()
    assert "thresholds must be strictly ascending; got 36000, 3600" in html
    assert "must be from 60 s (a minute)" in html
    assert PolicyVersion.objects.count() == 1 and not AuditEntry.objects.exists()


def test_the_half_life_is_shown_in_words_and_the_form_takes_back_what_it_shows(staff):
    client = client_for(staff)
    page = client.get("/govern/policies/rota/").content.decode()
    shown = page.split('name="fair_share_half_life_s"', 1)[1].split('value="', 1)[1].split('"', 1)[0]
    assert shown == "7 days"
    assert client.post("/govern/policies/rota/", {**FORM, "fair_share_half_life_s": shown, "backfill": "",
                                                  "reason": "as shown"}).status_code == 302
    assert PolicyVersion.objects.get(number=2).fair_share_half_life_s == 604800.0
    for typed, seconds in (("36 hours", 129600.0), ("90 min", 5400.0), ("2w", 1209600.0), ("3600", 3600.0)):
        assert client.post("/govern/policies/rota/", {**FORM, "fair_share_half_life_s": typed,
                                                      "reason": typed}).status_code == 302, typed
        assert PolicyVersion.objects.order_by("-number").first().fair_share_half_life_s == seconds
    page = client.get("/govern/policies/rota/").content.decode()
    assert "<code>fair_share_half_life_s</code> = 90 minutes" in page and 'value="1 hour"' in page
    bad = client.post("/govern/policies/rota/", {**FORM, "fair_share_half_life_s": "a fortnight", "reason": "x"})
    assert bad.status_code == 400 and "such as 7 days, 36 hours" in bad.content.decode()


def test_an_edit_of_the_active_policy_is_a_new_version_that_goes_live(staff):
    response = client_for(staff).post("/govern/policies/rota/", {**FORM, "backfill": "", "reason": "no gaps"})
    assert response.status_code == 302 and response["Location"] == "/govern/policies/rota/"
    assert policy_active().label == "rota v2" and policy_active().policy.backfill is False
    assert PolicyVersion.objects.get(policy__name="rota", number=1).backfill is True
    edit = AuditEntry.objects.get(action="policy.version")
    assert (edit.before, edit.after, edit.reason) == ({"version": 1, "backfill": True},
                                                      {"version": 2, "backfill": False}, "no gaps")
    page = client_for(staff).get("/govern/policies/rota/").content.decode()
    assert "<code>backfill</code> = False" in page and "Activate v1" in page  # history, and a way back


def test_an_edit_needs_a_reason(staff):
    response = client_for(staff).post("/govern/policies/rota/", {**FORM, "placement": "spread", "reason": ""})
    assert response.status_code == 400 and "a reason is required" in response.content.decode()
    assert PolicyVersion.objects.count() == 1


def test_an_admin_activates_another_version_with_a_reason(staff):
    client = client_for(staff)
    client.post("/govern/policies/", {**FORM, "name": "spread", "placement": "spread", "reason": "draft"})
    refused = client.post("/govern/policies/spread/versions/1/activate/", {"reason": ""})
    assert refused.status_code == 400 and policy_active().label == "rota v1"
    run_cycle()
    assert "under rota v1." in client.get("/govern/policies/").content.decode()  # the last cycle's version
    response = client.post("/govern/policies/spread/versions/1/activate/", {"reason": "balance the nodes"})
    assert response.status_code == 302 and policy_active().label == "spread v1"
    entry = AuditEntry.objects.get(action="policy.activate")
    assert (entry.before, entry.after, entry.actor_name) == ({"active": "rota v1"}, {"active": "spread v1"}, "root")
    page = client.get("/govern/policies/").content.decode()
    assert '<strong id="active-policy">spread v1</strong>' in page and "under rota v1." in page
    run_cycle()
    assert "under spread v1." in client.get("/govern/policies/").content.decode()


@pytest.mark.parametrize("method, path", [
    ("get", "/govern/policies/"), ("post", "/govern/policies/"), ("get", "/govern/policies/rota/"),
    ("post", "/govern/policies/rota/"), ("post", "/govern/policies/rota/versions/1/activate/"),
])
def test_non_admins_get_404_and_change_nothing(alice, method, path):
    response = getattr(client_for(alice), method)(path, {**FORM, "name": "mine", "placement": "spread",
                                                         "reason": "mine"})
    assert response.status_code == 404
    assert list(SchedulingPolicy.objects.values_list("name", flat=True)) == ["rota"]
    assert PolicyVersion.objects.count() == 1 and not AuditEntry.objects.exists()
