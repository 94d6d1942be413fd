"""Budgets that warn and act: thresholds (50 %, the warning share, 100 %) fire once each per month, shown to
platform admins and on the team's page; an enforced budget, once spent, refuses new submissions or lowers
their priority as its admin chose, with the reason said."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from accounting.budgets import budgets_refresh
from accounting.models import Budget, BudgetAlert
from accounting.services import usage_rollup
from accounting.services_billing import rate_card_create
from portal.governance.services import budget_set
from scheduler.services.common import db_now
from scheduler.services.jobs import job_submit
from tests.accounting.helpers import allocate, make_job

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)  # vision used 82.50 in cost in November
DECEMBER = datetime(2026, 12, 2, 12, tzinfo=UTC)


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def submit(user, **kw):
    return job_submit(user=user, name="next", command="true", gpu_model="h100-80gb", **kw)


def test_each_threshold_fires_once_a_month(cluster, usage):
    budget = Budget.objects.create(team=cluster["vision"], unit=Budget.MONEY, amount=Decimal("100"), warn_percent=70)
    budgets_refresh(NOW)
    budgets_refresh(NOW)
    assert sorted(BudgetAlert.objects.values_list("threshold", flat=True)) == [50, 70]
    Budget.objects.filter(pk=budget.pk).update(amount=Decimal("80"))
    budgets_refresh(NOW)
    budgets_refresh(NOW)
    alerts = BudgetAlert.objects.order_by("threshold")
    assert [(a.threshold, a.used, a.period_start.month) for a in alerts] == [
        (50, Decimal("82.50"), 11), (70, Decimal("82.50"), 11), (100, Decimal("82.50"), 11)]
    budgets_refresh(DECEMBER)  # a new month starts with nothing used: no alert yet
    assert BudgetAlert.objects.count() == 3


def test_a_spent_budget_that_blocks_refuses_new_submissions_of_its_team_only(alice, charlie, cluster, usage, api):
    Budget.objects.create(team=cluster["vision"], unit=Budget.MONEY, amount=Decimal("80"), enforce=True,
                          action=Budget.BLOCK)
    budgets_refresh(NOW)
    with pytest.raises(ValidationError) as refused:
        submit(alice)
    message = refused.value.message_dict["team"][0]
    assert "82.50 of its 80.00" in message and "refuses new submissions" in message
    response = api(alice).post("/api/v1/jobs/", {"name": "x", "command": "true", "gpu_model": "h100-80gb"},
                               format="json")
    assert response.status_code == 400 and "refuses new submissions" in response.json()["errors"]["team"][0]
    assert submit(charlie).state == "pending", "another team submits as before"


def test_a_spent_budget_that_lowers_priority_runs_new_work_at_the_lowest_class_and_says_why(alice, cluster, usage):
    Budget.objects.create(team=cluster["vision"], unit=Budget.MONEY, amount=Decimal("80"), enforce=True,
                          action=Budget.LOWER)
    budgets_refresh(NOW)
    job = submit(alice, priority_class="interactive")
    assert job.priority_class.name == "batch"
    assert "submitted at priority class batch: team vision has used 82.50" in job.transitions.get().cause


def test_a_budget_that_only_warns_never_acts(alice, cluster, usage):
    Budget.objects.create(team=cluster["vision"], unit=Budget.MONEY, amount=Decimal("80"), enforce=False,
                          action=Budget.BLOCK)
    budgets_refresh(NOW)
    job = submit(alice)
    assert job.priority_class.name == "training"
    assert BudgetAlert.objects.filter(threshold=100).exists()


def test_admins_choose_the_action_see_the_alerts_and_the_team_sees_its_thresholds(staff, alice, cluster):
    # Two hours of one h100 at 4.00 an hour this month (the page shows the current month).
    rate_card_create(version=1, effective_from=datetime(2026, 1, 1, tzinfo=UTC), prices={"h100-80gb": Decimal("4")})
    now = db_now().replace(minute=0, second=0, microsecond=0)
    start = max(now - timedelta(hours=2), now.replace(day=1, hour=0))
    allocate(make_job(alice, cluster["vision"]), "GPU-h100-0", start, now)
    usage_rollup(until=now)
    spent = Decimal((now - start).total_seconds() / 3600 * 4)
    budget = budget_set(user=staff, team=cluster["vision"], unit=Budget.MONEY, reason="plan",
                        values={"amount": spent * Decimal("1.5"), "warn_percent": 80, "enforce": True,
                                "action": "lower"})
    assert budget.action == Budget.LOWER
    page = client_for(staff).get("/govern/budgets/").content.decode()
    assert "lower the priority of new submissions" in page and 'id="budget-alerts"' in page and "50%" in page
    team_page = client_for(alice).get("/teams/vision/").content.decode()
    assert "50% reached" in team_page and "80% reached" not in team_page and "100%" in team_page
    form = {"team": cluster["nlp"].pk, "unit": "money", "amount": "10", "warn_percent": "80", "enforce": "on",
            "action": "block", "reason": "pilot"}
    assert client_for(staff).post("/govern/budgets/new/", form).status_code == 302
    assert Budget.objects.get(team=cluster["nlp"]).action == Budget.BLOCK
