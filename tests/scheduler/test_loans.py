"""Quota loans end to end: asked by the borrower's team-admin, approved by the lender's, counted by the
engine during the window only, ended and audited by the system, visible to both teams and no one else."""

from datetime import timedelta

import pytest

from portal.models import AuditEntry, Membership
from scheduler.cycle import run_cycle
from scheduler.models import Job, Preemption, Quota, QuotaLoan
from scheduler.models.jobs import JobState
from scheduler.services.common import db_now
from scheduler.services.jobs import job_submit
from scheduler.services.loans import loans_end
from tests.factories import MembershipFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def admins(cluster):
    """A team-admin of vision (the lender) and one of nlp (the borrower); vision guarantees 4 h100."""
    Quota.objects.filter(team=cluster["vision"], gpu_model=cluster["h100"]).update(guaranteed=4, limit=4)
    vadmin, nadmin = UserFactory(username="vadmin"), UserFactory(username="nadmin")
    MembershipFactory(user=vadmin, team=cluster["vision"], role=Membership.TEAM_ADMIN)
    MembershipFactory(user=nadmin, team=cluster["nlp"], role=Membership.TEAM_ADMIN)
    return vadmin, nadmin


def ask(client, **body):
    values = {"borrower": "nlp", "lender": "vision", "gpu_model": "h100-80gb", "gpus": "4",
              "ends_at": (db_now() + timedelta(hours=1)).isoformat(), "reason": "paper deadline", **body}
    return client.post("/api/v1/quota-loans/", values, format="json")


def test_a_loan_moves_four_gpus_of_guarantee_for_its_window_and_back_after(api, admins, alice, charlie):
    vadmin, nadmin = admins
    asked = ask(api(nadmin))
    assert asked.status_code == 201, asked.json()
    loan_id = asked.json()["id"]
    assert asked.json()["state"] == "requested"
    big = job_submit(user=charlie, name="big", command="true", gpu_model="h100-80gb", gpus=4)
    run_cycle()
    big.refresh_from_db()
    assert big.state == JobState.PENDING and big.pending_reason_code == "QuotaExceeded", "asked is not approved"
    # Only the lender decides; the borrower's admin and members may not.
    assert api(nadmin).post(f"/api/v1/quota-loans/{loan_id}/approve/").status_code == 403
    assert api(charlie).post(f"/api/v1/quota-loans/{loan_id}/approve/").status_code == 403
    approved = api(vadmin).post(f"/api/v1/quota-loans/{loan_id}/approve/", {"note": "ok"}, format="json")
    assert approved.status_code == 200 and approved.json()["status"] == "active"
    run_cycle()
    big.refresh_from_db()
    assert big.state == JobState.ADMITTED, "nlp runs 4 h100 on vision's lent guarantee"
    # vision's own work waits: its guarantee is lent, so it cannot take the GPUs back during the window.
    mine = job_submit(user=alice, name="mine", command="true", gpu_model="h100-80gb", gpus=4)
    run_cycle()
    assert not Preemption.objects.exists()
    mine.refresh_from_db()
    assert mine.state == JobState.PENDING
    # The window ends (moved into the past: the database clock cannot be wound forward).
    QuotaLoan.objects.filter(pk=loan_id).update(starts_at=db_now() - timedelta(hours=1),
                                                ends_at=db_now() - timedelta(seconds=1))
    assert loans_end() == [loan_id] and loans_end() == []
    assert QuotaLoan.objects.get(pk=loan_id).state == QuotaLoan.ENDED
    # big has held them a while too (reclaim's hysteresis spares work admitted in the last two cycles).
    Job.objects.filter(pk=big.pk).update(admitted_at=db_now() - timedelta(hours=1))
    run_cycle()
    assert Preemption.objects.filter(job=big, by_job=mine, reason="Reclaim").exists(), "reclaim returns them"
    entries = AuditEntry.objects.filter(object_type="quota_loan").order_by("id")
    actions = list(entries.values_list("action", "actor_name"))
    assert actions == [("quota_loan.request", "nadmin"), ("quota_loan.approve", "vadmin"),
                       ("quota_loan.end", "system")]


def test_a_loan_asks_no_more_than_the_lender_can_lend_and_names_bad_fields(api, admins):
    vadmin, nadmin = admins
    too_many = ask(api(nadmin), gpus="5")
    assert too_many.status_code == 400 and "at most 4" in too_many.json()["errors"]["gpus"][0]
    assert ask(api(nadmin), gpus="4").status_code == 201
    loan = QuotaLoan.objects.get()
    api(vadmin).post(f"/api/v1/quota-loans/{loan.pk}/approve/")
    # Its whole guarantee is lent for that hour: a second loan overlapping it gets nothing.
    again = ask(api(nadmin), gpus="1")
    assert again.status_code == 400 and "at most 0" in again.json()["errors"]["gpus"][0]
    past = (db_now() - timedelta(hours=1)).isoformat()
    bad = ask(api(nadmin), lender="nlp", gpu_model="nope", gpus="-1", ends_at=past, reason=" ")
    assert bad.status_code == 400
    assert set(bad.json()["errors"]) >= {"lender", "gpu_model", "gpus", "ends_at", "reason"}
    assert QuotaLoan.objects.count() == 1


def test_members_may_not_ask_and_outsiders_see_no_loan(api, admins, charlie):
    vadmin, nadmin = admins
    assert ask(api(charlie)).status_code == 403, "members of the borrower do not ask"
    loan_id = ask(api(nadmin)).json()["id"]
    outsider = UserFactory(username="olga")
    MembershipFactory(user=outsider, team=TeamFactory(name="speech"))
    assert api(outsider).get(f"/api/v1/quota-loans/{loan_id}/").status_code == 404
    assert api(outsider).post(f"/api/v1/quota-loans/{loan_id}/approve/").status_code == 404
    assert api(outsider).get("/api/v1/quota-loans/").json() == []
    assert [x["id"] for x in api(charlie).get("/api/v1/quota-loans/").json()] == [loan_id]
    assert ask(api(outsider), borrower="nlp").status_code == 400


def test_a_declined_loan_changes_nothing_and_a_cancelled_one_ends_at_once(api, admins, charlie):
    vadmin, nadmin = admins
    first = ask(api(nadmin)).json()["id"]
    assert api(vadmin).post(f"/api/v1/quota-loans/{first}/decline/").json()["status"] == "declined"
    assert api(vadmin).post(f"/api/v1/quota-loans/{first}/approve/").status_code == 400
    second = ask(api(nadmin)).json()["id"]
    api(vadmin).post(f"/api/v1/quota-loans/{second}/approve/")
    cancelled = api(nadmin).post(f"/api/v1/quota-loans/{second}/cancel/").json()
    assert cancelled["status"] == "cancelled"
    big = job_submit(user=charlie, name="big", command="true", gpu_model="h100-80gb", gpus=4)
    run_cycle()
    assert Job.objects.get(pk=big.pk).pending_reason_code == "QuotaExceeded"


def test_both_teams_pages_show_the_loan_and_the_lender_approves_there(client, admins):
    vadmin, nadmin = admins
    client.force_login(nadmin)
    start = db_now().strftime("%Y-%m-%dT%H:%M")
    end = (db_now() + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M")
    response = client.post("/teams/nlp/loans/", {"lender": "vision", "gpu_model": "h100-80gb", "gpus": "2",
                                                 "starts_at": start, "ends_at": end, "reason": "deadline"})
    assert response.status_code == 302
    loan = QuotaLoan.objects.get()
    assert "borrowed" in client.get("/teams/nlp/").content.decode()
    client.force_login(vadmin)
    page = client.get("/teams/vision/").content.decode()
    assert "lent" in page and "deadline" in page and f"/teams/vision/loans/{loan.pk}/approve/" in page
    client.post(f"/teams/vision/loans/{loan.pk}/approve/")
    loan.refresh_from_db()
    assert loan.state == QuotaLoan.APPROVED and loan.decided_by == vadmin
