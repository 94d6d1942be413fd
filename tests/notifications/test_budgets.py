"""Budget notifications: a team's budget passing 50 / 80 / 100 % this month is told once per threshold, only
the highest newly passed, and only to members who asked and may see the team's costs."""

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from accounting.models import Budget
from notifications.budgets import budget_notify, passed_threshold
from notifications.models import Notification
from notifications.services import preference_save
from tests.accounting.conftest import usage  # noqa: F401 (fixture: vision used 82.50 in cost in November)

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)


@pytest.mark.parametrize("used, amount, threshold", [
    (Decimal(10), Decimal(100), None), (Decimal(50), Decimal(100), 50), (Decimal("79.99"), Decimal(100), 50),
    (Decimal(80), Decimal(100), 80), (Decimal(130), Decimal(100), 100), (Decimal(1), Decimal(0), 100),
])
def test_the_highest_threshold_passed(used, amount, threshold):
    assert passed_threshold(used, amount) == threshold


def test_a_budget_past_a_threshold_is_told_once_to_members_who_asked(alice, bob, charlie, cluster,
                                                                     usage):  # noqa: F811
    for user in (alice, bob, charlie):
        preference_save(user=user, events=["budget-threshold"], scope="team", email_enabled=False, webhook_url="")
    budget = Budget.objects.create(team=cluster["vision"], unit=Budget.MONEY, amount=Decimal("150.00"))
    budget_notify(NOW)  # 82.50 of 150: 55 %
    budget_notify(NOW)
    notes = Notification.objects.filter(event="budget-threshold")
    assert sorted(notes.values_list("user__username", flat=True)) == ["alice", "bob"]  # charlie is nlp
    assert notes.first().message == "team vision has used 82.50 of its 150.00 in cost budget this month (50 % or more)"
    Budget.objects.filter(pk=budget.pk).update(amount=Decimal("80.00"))  # now past 100 %: one more each, not two
    budget_notify(NOW)
    assert sorted(Notification.objects.filter(user=alice).values_list("key", flat=True)) == [
        f"budget:{budget.pk}:2026-11:100", f"budget:{budget.pk}:2026-11:50"]
