"""Budget enforcement at admission: after each usage rollup, every enforced budget is compared with its
team's usage this month (GPU-hours or money at the rate card); a team past its budget has its waiting jobs
held back by the scheduling cycle with the reason BudgetExceeded until the month ends or the budget grows.
Running work is never stopped for a budget."""

from collections import defaultdict
from datetime import datetime
from decimal import Decimal

from django.db.models import Sum

from accounting.models import Budget, UsageRecord
from accounting.periods import Range, _at, month_start, next_month
from accounting.rating import RateBook, cost
from accounting.selectors import rate_cards
from portal.models import Team

BUDGET_EXCEEDED = "BudgetExceeded"


def _month(now: datetime) -> Range:
    first = month_start(now.date())
    return Range(_at(first), _at(next_month(first)), first.strftime("%B %Y"))


def team_month_usage(teams: list[Team], now: datetime) -> dict[int, tuple[Decimal, Decimal]]:
    """(GPU-hours, cost) of each team so far this month, from the ledger. One query plus the rate cards."""
    month = _month(now)
    book = RateBook(rate_cards())
    used: dict[int, list[Decimal]] = defaultdict(lambda: [Decimal(0), Decimal(0)])
    rows = (UsageRecord.objects.filter(team__in=teams, period_start__gte=month.start, period_start__lt=month.end)
            .values("team_id", "gpu_model__name", "period_start").annotate(gs=Sum("gpu_seconds")))
    for row in rows:
        price, _ = book.price(row["gpu_model__name"], row["period_start"])
        totals = used[row["team_id"]]
        totals[0] += row["gs"] / Decimal(3600)
        totals[1] += cost(row["gs"], price)
    return {team_id: (hours.quantize(Decimal("0.01")), money) for team_id, (hours, money) in used.items()}


def budget_used(budget: Budget, usage: dict[int, tuple[Decimal, Decimal]]) -> Decimal:
    """What ``budget``'s team used this month in the budget's unit, from ``team_month_usage``."""
    hours, money = usage.get(budget.team_id, (Decimal(0), Decimal(0)))
    return money if budget.unit == Budget.MONEY else hours


def budgets_refresh(now: datetime, budgets: list[Budget] | None = None) -> list[str]:
    """Update every enforced budget's usage and its exceeded mark (``budgets``: only these, e.g. one an admin
    just changed); returns the teams now over budget. A budget that is not enforced never holds work back."""
    if budgets is not None:
        Budget.objects.filter(pk__in=[b.pk for b in budgets if not b.enforce]).update(exceeded_at=None)
        budgets = [b for b in budgets if b.enforce]
    else:
        budgets = list(Budget.objects.filter(enforce=True).select_related("team"))
    if not budgets:
        return []
    usage = team_month_usage([b.team for b in budgets], now)
    over = []
    for budget in budgets:
        used = budget_used(budget, usage)
        exceeded = used > budget.amount
        Budget.objects.filter(pk=budget.pk).update(
            used=used, exceeded_at=(budget.exceeded_at or now) if exceeded else None)
        if exceeded:
            over.append(budget.team.name)
    return over


def exceeded_teams() -> dict[str, str]:
    """Teams whose enforced budget is spent, with the message the waiting jobs show. One query."""
    out = {}
    for team, unit, amount, used in Budget.objects.filter(enforce=True, exceeded_at__isnull=False).values_list(
        "team__name", "unit", "amount", "used"
    ):
        what = "GPU-hours" if unit == Budget.GPU_HOURS else "in cost"
        out[team] = (f"team {team} has used {used} of its {amount} {what} budget this month; "
                     "waiting work starts when the budget is raised or the month ends")
    return out
