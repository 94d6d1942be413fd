"""Budgets under Govern → Budgets: platform admins only, a reason for every change, audited before/after, and
an enforced budget's hold is re-judged at once when it changes (raising it lets waiting work start at the next
cycle, not after the next usage rollup). The Django admin only shows them."""

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.test import Client

from accounting.budgets import budgets_refresh
from accounting.models import Budget
from portal.governance.services import budget_delete, budget_set
from portal.models import AuditEntry
from scheduler.cycle import run_cycle
from scheduler.services.jobs import job_submit

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)  # vision used 82.50 in cost, 21 GPU-hours in November


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_raising_an_enforced_budget_lets_the_waiting_work_start_at_the_next_cycle(staff, alice, cluster, usage):
    budget = budget_set(user=staff, team=cluster["vision"], unit=Budget.GPU_HOURS, now=NOW, reason="Q4 plan",
                        values={"amount": Decimal("20"), "warn_percent": 80, "enforce": True})
    assert budget.exceeded_at is not None and budget.used == Decimal("21.00"), "judged when saved"
    job = job_submit(user=alice, name="next", command="true", gpu_model="h100-80gb")
    run_cycle()
    job.refresh_from_db()
    assert job.pending_reason_code == "BudgetExceeded"
    budget = budget_set(user=staff, team=cluster["vision"], unit=Budget.GPU_HOURS, instance=budget, now=NOW,
                        values={"amount": Decimal("30"), "warn_percent": 80, "enforce": True}, reason="more")
    assert budget.exceeded_at is None, "no usage rollup needed"
    run_cycle()
    job.refresh_from_db()
    assert job.state == "admitted"
    create, update = AuditEntry.objects.filter(object_type="budget").order_by("id")
    assert create.action == "budget.create" and create.before is None and create.after["amount"] == "20"
    assert update.before["amount"] == "20" and update.after["amount"] == "30" and update.reason == "more"


def test_a_budget_no_longer_enforced_or_removed_holds_nothing_back(staff, cluster, usage):
    budget = Budget.objects.create(team=cluster["vision"], unit=Budget.MONEY, amount=Decimal("80"), enforce=True)
    budgets_refresh(NOW)
    budget = budget_set(user=staff, team=cluster["vision"], unit=Budget.MONEY, instance=budget, now=NOW,
                        values={"amount": Decimal("80"), "warn_percent": 80, "enforce": False}, reason="warn only")
    assert budget.exceeded_at is None
    Budget.objects.filter(pk=budget.pk).update(enforce=True)
    budgets_refresh(NOW)
    budget_delete(user=staff, budget=budget, reason="project ended")
    assert not Budget.objects.exists()
    entry = AuditEntry.objects.filter(action="budget.delete").get()
    assert entry.before["team"] == "vision" and entry.after is None and entry.reason == "project ended"


def test_the_page_lists_budgets_with_this_months_use_and_edits_them_with_a_reason(staff, cluster):
    client = client_for(staff)
    page = client.get("/govern/budgets/").content.decode()
    assert "No budgets" in page and 'href="/govern/budgets/new/"' in page
    form = {"team": cluster["vision"].pk, "unit": "gpu-hours", "amount": "500", "warn_percent": "80",
            "enforce": "on", "reason": ""}
    refused = client.post("/govern/budgets/new/", form)
    assert refused.status_code == 400 and "a reason is required" in refused.content.decode()
    assert not Budget.objects.exists(), "nothing half-written"
    assert client.post("/govern/budgets/new/", form | {"reason": "quarterly plan"}).status_code == 302
    budget = Budget.objects.get()
    assert (budget.amount, budget.enforce, budget.period) == (Decimal("500.00"), True, "month")
    page = client.get("/govern/budgets/").content.decode()
    assert "vision" in page and "500.00" in page and f'href="/govern/budgets/{budget.pk}/"' in page
    page = client.get(f"/govern/budgets/{budget.pk}/").content.decode()
    assert "<h2 id=\"edit-form-h\">Budget of team vision (GPU-hours)</h2>" in page
    assert '<a href="/govern/budgets/">Cancel</a>' in page and "Remove budget" in page
    twice = client.post("/govern/budgets/new/", form | {"reason": "again"})
    assert twice.status_code == 400 and "already has a monthly gpu-hours budget" in twice.content.decode()
    bad = client.post(f"/govern/budgets/{budget.pk}/", form | {"amount": "-5", "warn_percent": "150",
                                                                "reason": "x"})
    body = bad.content.decode()
    assert bad.status_code == 400 and "greater than or equal to 0" in body and "less than or equal to 100" in body
    edit = client.post(f"/govern/budgets/{budget.pk}/", form | {"amount": "750.5", "team": cluster["nlp"].pk,
                                                                 "reason": "more data"})
    assert edit.status_code == 302
    budget.refresh_from_db()
    assert budget.amount == Decimal("750.50") and budget.team == cluster["vision"], "the team stays"
    refused = client.post(f"/govern/budgets/{budget.pk}/delete/", {"reason": " "})
    assert refused.status_code == 302 and Budget.objects.exists()
    client.post(f"/govern/budgets/{budget.pk}/delete/", {"reason": "project ended"})
    assert not Budget.objects.exists()
    assert list(AuditEntry.objects.filter(object_type="budget").values_list("action", flat=True).order_by("id")) == [
        "budget.create", "budget.update", "budget.delete"]


def test_members_and_finance_neither_see_nor_change_budgets_here(alice, cluster):
    budget = Budget.objects.create(team=cluster["vision"], unit=Budget.MONEY, amount=Decimal("80"))
    client = client_for(alice)
    for url in ("/govern/budgets/", "/govern/budgets/new/", f"/govern/budgets/{budget.pk}/"):
        assert client.get(url).status_code == 404
    assert client.post(f"/govern/budgets/{budget.pk}/delete/", {"reason": "mine now"}).status_code == 404
    assert Budget.objects.filter(pk=budget.pk).exists()
    with pytest.raises(Exception, match="only platform admins"):
        budget_delete(user=alice, budget=budget, reason="x")


def test_the_django_admin_only_shows_budgets(cluster, client):
    from tests.factories import UserFactory

    budget = Budget.objects.create(team=cluster["vision"], unit=Budget.MONEY, amount=Decimal("80"))
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    assert client.get(f"/admin/accounting/budget/{budget.pk}/change/").status_code == 200
    response = client.post(f"/admin/accounting/budget/{budget.pk}/change/",
                           {"team": budget.team_id, "unit": "money", "amount": "99999", "warn_percent": "80",
                            "period": "month"})
    assert response.status_code == 403
    budget.refresh_from_db()
    assert budget.amount == Decimal("80")
