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
    members: dict[int, set[int]] = {}  # team -> its members, one query for every budget's team
    for team_id, user_id in Membership.objects.filter(team_id__in=[b.team_id for b in budgets]).values_list(
            "team_id", "user_id"):
        members.setdefault(team_id, set()).add(user_id)
    cost_teams: dict[int, set[int]] = {}  # person -> the teams whose costs they may see, read once each

    def sees_costs(pref, team_id: int) -> bool:
        if pref.user_id not in cost_teams:
            cost_teams[pref.user_id] = set(cost_teams_for(pref.user).values_list("pk", flat=True))
        return team_id in cost_teams[pref.user_id]

    made = []
    for budget in budgets:
        used = budget_used(budget, usage)
        threshold = passed_threshold(used, budget.amount, budget_thresholds(budget))
        if threshold is None:
            continue
        unit = "GPU-hours" if budget.unit == Budget.GPU_HOURS else "in cost"
        message = (f"team {budget.team.name} has used {used:.2f} of its {budget.amount} {unit} budget this month "
                   f"({threshold} % or more)")
        prefix = f"budget:{budget.pk}:{month}:"
        for pref in prefs:
            if pref.user_id not in members.get(budget.team_id, ()) or not sees_costs(pref, budget.team_id):
                continue
            told = [int(k.rsplit(":", 1)[1]) for k in Notification.objects.filter(
                user=pref.user, key__startswith=prefix).values_list("key", flat=True)]
            if told and max(told) >= threshold:
                continue
            made += notification_record(pref, key=f"{prefix}{threshold}", event=BUDGET_THRESHOLD, message=message,
                                        job=None)
    return made
