"""Budget enforcement at admission: a team past an enforced budget waits with BudgetExceeded; raising the
budget (or a new month) lets its work start; budgets that only warn never hold anything back."""

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from accounting.budgets import budgets_refresh, exceeded_teams
from accounting.models import Budget
from scheduler.cycle import run_cycle
from scheduler.services.jobs import job_submit

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)  # vision used 82.50 in cost, 21 GPU-hours in November


def waiting_job(user, **kw):
    return job_submit(user=user, name="next", command="true", gpu_model="h100-80gb", **kw)


def test_a_team_past_its_enforced_budget_waits_with_budget_exceeded(alice, charlie, cluster, usage):
    Budget.objects.create(team=cluster["vision"], unit=Budget.MONEY, amount=Decimal("80.00"), enforce=True)
    assert budgets_refresh(NOW) == ["vision"]
    assert "82.50 of its 80.00" in exceeded_teams()["vision"]
    held, other = waiting_job(alice), waiting_job(charlie)
    run_cycle()
    held.refresh_from_db()
    other.refresh_from_db()
    assert held.state == "pending" and held.pending_reason_code == "BudgetExceeded"
    assert "82.50 of its 80.00" in held.pending_reason_message
    assert other.state == "admitted", "other teams are not held back"


def test_the_quote_says_a_team_past_its_enforced_budget_waits(alice, charlie, cluster, usage):
    from scheduler.services.quote import job_quote

    request = {"name": "next", "command": "true", "gpu_model": "h100-80gb"}
    assert job_quote(user=alice, **request)["starts_now"] is True
    Budget.objects.create(team=cluster["vision"], unit=Budget.MONEY, amount=Decimal("80.00"), enforce=True)
    budgets_refresh(NOW)
    quote = job_quote(user=alice, **request)
    assert quote["starts_now"] is False and quote["estimated_start"] is None
    assert quote["pending_reason"]["code"] == "BudgetExceeded" and "82.50 of its 80.00" in (
        quote["pending_reason"]["message"])
    assert job_quote(user=charlie, **request)["starts_now"] is True  # nlp's budget is its own


def test_raising_the_budget_lets_the_work_start(alice, cluster, usage):
    budget = Budget.objects.create(team=cluster["vision"], unit=Budget.GPU_HOURS, amount=Decimal("20"),
                                   enforce=True)
    budgets_refresh(NOW)
    job = waiting_job(alice)
    run_cycle()
    job.refresh_from_db()
    assert job.pending_reason_code == "BudgetExceeded"
    Budget.objects.filter(pk=budget.pk).update(amount=Decimal("30"))
    assert budgets_refresh(NOW) == []
    run_cycle()
    job.refresh_from_db()
    assert job.state == "admitted"


def test_a_new_month_starts_with_a_clean_budget(alice, cluster, usage):
    Budget.objects.create(team=cluster["vision"], unit=Budget.GPU_HOURS, amount=Decimal("20"), enforce=True)
    assert budgets_refresh(NOW) == ["vision"]
    assert budgets_refresh(datetime(2026, 12, 1, 0, 5, tzinfo=UTC)) == []


def test_a_budget_that_only_warns_holds_nothing_back(alice, cluster, usage):
    Budget.objects.create(team=cluster["vision"], unit=Budget.MONEY, amount=Decimal("1.00"), enforce=False)
    assert budgets_refresh(NOW) == []
    job = waiting_job(alice)
    run_cycle()
    job.refresh_from_db()
    assert job.state == "admitted"
