"""Budgets: after each usage rollup every budget is compared with its team's usage this month (GPU-hours or
money at the rate card). Each threshold (50 %, the budget's warning share, 100 %) fires one alert per month.
An enforced budget, once spent, acts as its admin chose: ``hold`` (the scheduling cycle holds the team's
waiting jobs back with the reason BudgetExceeded), ``block`` (new submissions are refused) or ``lower`` (new
submissions run at the lowest priority class the team may use), until the month ends or the budget grows.
Running work is never stopped for a budget."""

from collections import defaultdict
from datetime import datetime
from decimal import Decimal

from django.db.models import Sum

from accounting.models import Budget, BudgetAlert, UsageRecord
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


def budget_thresholds(budget: Budget) -> list[int]:
    """The percentages at which ``budget`` alerts: 50, its warning share and 100."""
    return sorted({50, int(budget.warn_percent), 100})


def budgets_refresh(now: datetime, budgets: list[Budget] | None = None) -> list[str]:
    """Update each budget's usage, its exceeded mark (enforced budgets only) and its alerts (``budgets``: only
    these, e.g. one an admin just changed); returns the teams now past an enforced budget."""
    if budgets is None:
        budgets = list(Budget.objects.select_related("team"))
    if not budgets:
        return []
    usage = team_month_usage([b.team for b in budgets], now)
    period = month_start(now.date())
    over = []
    for budget in budgets:
        used = budget_used(budget, usage)
        exceeded = budget.enforce and used > budget.amount
        Budget.objects.filter(pk=budget.pk).update(
            used=used, exceeded_at=(budget.exceeded_at or now) if exceeded else None)
        for threshold in budget_thresholds(budget):
            if used * 100 >= budget.amount * threshold:  # once per period: the unique row says it fired
                BudgetAlert.objects.get_or_create(budget=budget, period_start=period, threshold=threshold,
                                                  defaults={"used": used, "amount": budget.amount, "fired_at": now})
        if exceeded:
            over.append(budget.team.name)
    return over


def _message(team: str, unit: str, amount, used) -> str:
    what = "GPU-hours" if unit == Budget.GPU_HOURS else "in cost"
    return f"team {team} has used {used} of its {amount} {what} budget this month"


def budget_action(team: Team) -> tuple[str, str] | None:
    """``(action, message)`` of ``team``'s spent enforced budget that acts at submit (``block`` before
    ``lower``), or None. One query."""
    rows = Budget.objects.filter(team=team, enforce=True, exceeded_at__isnull=False,
                                 action__in=(Budget.BLOCK, Budget.LOWER)).order_by().values_list(
        "action", "unit", "amount", "used")  # no order (the model's joins the team for its name): sorted below
    for action, unit, amount, used in sorted(rows, key=lambda r: r[0] != Budget.BLOCK):
        return action, _message(team.name, unit, amount, used)
    return None


def exceeded_teams() -> dict[str, str]:
    """Teams whose enforced budget is spent, with the message the waiting jobs show. One query."""
    out = {}
    for team, unit, amount, used in Budget.objects.filter(
            enforce=True, action=Budget.HOLD, exceeded_at__isnull=False).values_list("team__name", "unit", "amount",
                                                                                      "used"):
        out[team] = (f"{_message(team, unit, amount, used)}; waiting work starts when the budget is raised or the "
                     "month ends")
    return out
