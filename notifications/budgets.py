"""Budget notifications: a team's monthly budget passing 50, 80 and 100 % is news to the members who asked
for it and may see the team's costs (``portal.access.cost_teams_for``). The thresholds are the budget's own
alerts' (``accounting.budgets.budget_thresholds``: 50 %, its warning share, 100 %). Checked periodically (beat); each
threshold is told once per budget and month, and only the highest one newly passed (a jump from 40 % to
110 % is one message, not three)."""

from datetime import datetime

from accounting.budgets import budget_thresholds, budget_used, team_month_usage
from accounting.models import Budget
from notifications.models import BUDGET_THRESHOLD, Notification, NotificationPreference
from notifications.services import notification_record
from portal.access import cost_teams_for
from portal.models import Membership


def passed_threshold(used, amount, thresholds=(50, 80, 100)) -> int | None:
    """The highest of ``thresholds`` (percent) that ``used`` has reached of ``amount``, or None."""
    if amount <= 0:
        return 100 if used > 0 else None
    percent = used * 100 / amount
    return max((t for t in thresholds if percent >= t), default=None)


def budget_notify(now: datetime) -> list[int]:
    """Tell who asked about budgets that passed a threshold this month; returns the new deliveries' ids.
    Safe to run twice or concurrently (one notification per person, budget, month and threshold)."""
    budgets = list(Budget.objects.select_related("team"))
    if not budgets:
        return []
    usage = team_month_usage([b.team for b in budgets], now)
    month = now.strftime("%Y-%m")
    prefs = [p for p in NotificationPreference.objects.filter(events__contains=[BUDGET_THRESHOLD])
             .select_related("user") if p.user.is_active]
    made = []
    for budget in budgets:
        used = budget_used(budget, usage)
        threshold = passed_threshold(used, budget.amount, budget_thresholds(budget))
        if threshold is None:
            continue
        members = set(Membership.objects.filter(team_id=budget.team_id).values_list("user_id", flat=True))
        unit = "GPU-hours" if budget.unit == Budget.GPU_HOURS else "in cost"
        message = (f"team {budget.team.name} has used {used:.2f} of its {budget.amount} {unit} budget this month "
                   f"({threshold} % or more)")
        prefix = f"budget:{budget.pk}:{month}:"
        for pref in prefs:
            if pref.user_id not in members or not cost_teams_for(pref.user).filter(pk=budget.team_id).exists():
                continue
            told = [int(k.rsplit(":", 1)[1]) for k in Notification.objects.filter(
                user=pref.user, key__startswith=prefix).values_list("key", flat=True)]
            if told and max(told) >= threshold:
                continue
            made += notification_record(pref, key=f"{prefix}{threshold}", event=BUDGET_THRESHOLD, message=message,
                                        job=None)
    return made
