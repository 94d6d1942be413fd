"""Report builders shared by the dashboard, the API and the exports: selectors + pure rating, no HTTP."""

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from accounting import charts
from accounting.capacity import Step
from accounting.idle import DEFAULT_POLICY, IdleReport, idle_lines, idle_report
from accounting.periods import Range, spans
from accounting.rating import BudgetStatus, RateCardVersion, RatedLine, budget_status, rate_lines, unrounded_cost
from accounting.selectors import budgets_for, rate_cards, usage_lines
from accounting.selectors_fairness import capacity_over, cluster_allocated

DEFAULT_CURRENCY = "USD"


def currency_of(cards: list[RateCardVersion]) -> str:
    return cards[-1].currency if cards else DEFAULT_CURRENCY


@dataclass
class Rated:
    lines: list[RatedLine]
    cards: list[RateCardVersion]

    @property
    def currency(self) -> str:
        return currency_of(self.cards)

    @property
    def total_cost(self) -> Decimal:
        return sum((r.cost for r in self.lines), Decimal(0))

    @property
    def efficiency(self) -> float | None:
        """Utilized / allocated GPU-seconds over the hours with telemetry; None without any."""
        measured = sum(r.usage.measured_gpu_seconds for r in self.lines)
        return sum(r.usage.utilized_gpu_seconds for r in self.lines) / measured if measured else None

    @property
    def unpriced(self) -> list[tuple[str, Decimal]]:
        """(GPU model, GPU-hours) used with no price on the rate card in force: their cost reads 0."""
        hours: dict[str, Decimal] = defaultdict(Decimal)
        for r in self.lines:
            if not r.rate and r.usage.gpu_seconds:
                hours[r.usage.gpu_model] += r.usage.gpu_hours
        return sorted(hours.items())

    @property
    def total_gpu_hours(self) -> Decimal:
        return sum((r.usage.gpu_hours for r in self.lines), Decimal(0))


def rated_usage(user, rng: Range, *, agg: str = "day", team=None) -> Rated:
    """Rated usage lines the user may see in ``rng`` (three queries)."""
    cards = rate_cards()
    return Rated(rate_lines(usage_lines(user, start=rng.start, end=rng.end, agg=agg, team=team), cards), cards)


def budget_statuses(user, month: Range) -> list[BudgetStatus]:
    """Each visible team budget against this month's usage (GPU-hours or cost)."""
    budgets = budgets_for(user)
    if not budgets:
        return []
    rated = rated_usage(user, month, agg="month")
    hours: dict[str, Decimal] = defaultdict(Decimal)
    money: dict[str, Decimal] = defaultdict(Decimal)
    for team, h, c in charts.totals_by(rated.lines, charts.key_of("team")):
        hours[team], money[team] = h, c
    out = []
    for b in budgets:
        used = money[b.team.name] if b.unit == b.MONEY else hours[b.team.name].quantize(Decimal("0.01"))
        out.append(budget_status(b.team.name, b.unit, b.amount, used, b.warn_percent))
    return out


def usage_summary(rated: Rated, group_by: str) -> list[dict]:
    """JSON-friendly rows per (period, group): GPU-seconds, GPU-hours and cost."""
    key = charts.key_of(group_by)
    acc: dict[tuple[datetime, str], list[Decimal]] = defaultdict(lambda: [Decimal(0), Decimal(0)])
    for line in rated.lines:
        cell = acc[(line.usage.period, key(line))]
        cell[0] += line.usage.gpu_seconds
        cell[1] += line.cost
    return [
        {
            "period": p.isoformat(),
            "group": g,
            "gpu_seconds": f"{s:.3f}",
            "gpu_hours": f"{s / 3600:.4f}",
            "cost": f"{c:.2f}",
        }
        for (p, g), (s, c) in sorted(acc.items())
    ]


def idle_policy() -> str:
    """``ROTA_IDLE_COST_POLICY``: hide, separate (the default) or share; checked when the app starts."""
    from django.conf import settings

    return getattr(settings, "ROTA_IDLE_COST_POLICY", DEFAULT_POLICY)


def idle_for(
    rng: Range,
    *,
    now: datetime,
    agg: str,
    visible: set[str] | None,
    cards: list[RateCardVersion],
    capacity: list[Step] | None = None,
    allocated: list[tuple] | None = None,
    policy: str | None = None,
) -> IdleReport:
    """Idle GPU capacity and its cost in ``rng`` (up to ``now``) under the idle cost policy, for a reader who
    sees the ``visible`` teams (None: every team). Two queries, one fewer for each of ``capacity`` (from
    ``capacity_over`` up to ``min(rng.end, now)``) and ``allocated`` (the rows of ``cluster_allocated`` for
    ``rng`` and ``agg``) passed in."""
    policy = policy or idle_policy()
    if policy == "hide":
        return IdleReport(policy, currency=currency_of(cards))
    horizon = min(rng.end, now)
    if horizon <= rng.start:
        return IdleReport(policy, currency=currency_of(cards))
    capacity = capacity_over(start=rng.start, end=horizon) if capacity is None else capacity
    by_key: dict[tuple, Decimal] = defaultdict(Decimal)
    team_costs: dict[str, Decimal] = defaultdict(Decimal)
    prices = {c.version: c.prices for c in cards}
    if allocated is None:
        allocated_rows = cluster_allocated(start=rng.start, end=rng.end, agg=agg)
    else:
        allocated_rows = allocated
    for period, team, model, card, seconds in allocated_rows:
        by_key[(period, model, card)] += seconds
        team_costs[team] += unrounded_cost(seconds, prices.get(card, {}).get(model, Decimal(0)))
    lines = idle_lines(periods=spans(rng.start, horizon, agg), capacity=capacity, allocated=by_key, cards=cards)
    return idle_report(
        policy=policy, lines=lines, team_costs=team_costs, visible_teams=visible, currency=currency_of(cards)
    )
