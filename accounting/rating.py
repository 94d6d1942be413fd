"""Rating: usage × price → cost. Pure (no Django, no clock); money is ``Decimal`` rounded half-up to cents.

Rate cards are versioned: the card in force for a usage row is the one with the latest
``effective_from`` at or before the row's period start. A GPU model missing from that card rates at zero
and is reported as unpriced rather than guessed.
"""

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal

CENT = Decimal("0.01")
SECONDS_PER_HOUR = Decimal(3600)


def round_money(amount: Decimal) -> Decimal:
    """Round to cents, half up (0.005 → 0.01), the rule finance expects."""
    return amount.quantize(CENT, rounding=ROUND_HALF_UP)


@dataclass(frozen=True, slots=True)
class RateCardVersion:
    """One rate card version: price per GPU-hour by GPU model name, in force from ``effective_from``."""

    version: int
    effective_from: datetime
    prices: dict[str, Decimal] = field(default_factory=dict)
    currency: str = "USD"


class RateBook:
    """All rate card versions, ordered, to find the one in force at a moment."""

    def __init__(self, cards: Iterable[RateCardVersion]):
        self.cards = sorted(cards, key=lambda c: c.effective_from)
        self._starts = [c.effective_from for c in self.cards]

    def card_at(self, at: datetime) -> RateCardVersion | None:
        i = bisect_right(self._starts, at)
        return self.cards[i - 1] if i else None

    def price(self, gpu_model: str, at: datetime) -> tuple[Decimal, int | None]:
        """(price per GPU-hour, card version) in force at ``at``; (0, None) with no card."""
        card = self.card_at(at)
        if card is None:
            return Decimal(0), None
        return card.prices.get(gpu_model, Decimal(0)), card.version


def cost(gpu_seconds: Decimal, price_per_gpu_hour: Decimal) -> Decimal:
    """The cost of ``gpu_seconds`` at ``price_per_gpu_hour``, rounded half-up to cents."""
    return round_money(Decimal(gpu_seconds) * price_per_gpu_hour / SECONDS_PER_HOUR)


def unrounded_cost(gpu_seconds: Decimal, price_per_gpu_hour: Decimal) -> Decimal:
    """Cost before rounding, for aggregates that round once at the end."""
    return Decimal(gpu_seconds) * price_per_gpu_hour / SECONDS_PER_HOUR


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    """How far a team is through its budget: ``level`` is ok, warn (at or past the warning threshold) or over."""

    team: str
    unit: str
    limit: Decimal
    used: Decimal
    percent: Decimal
    level: str


def budget_status(team: str, unit: str, limit: Decimal, used: Decimal, warn_percent: int) -> BudgetStatus:
    """Compare ``used`` with ``limit`` (same unit: gpu-hours or money)."""
    percent = (used * 100 / limit).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP) if limit > 0 else Decimal(0)
    level = "over" if used > limit else "warn" if percent >= warn_percent else "ok"
    return BudgetStatus(team=team, unit=unit, limit=limit, used=used, percent=percent, level=level)


def sum_costs(costs: Sequence[Decimal]) -> Decimal:
    return sum(costs, Decimal(0))


@dataclass(frozen=True, slots=True)
class UsageLine:
    """Ledger GPU-seconds summed over one group: a period, a job (with its team, user, kind, pool) on one GPU
    model under one rate card version. Plain data built by the selectors, rated here."""

    period: datetime
    team: str
    department: str
    user: str
    job_id: int
    job_name: str
    kind: str
    gpu_model: str
    pool: str
    gpus: Decimal
    card_version: int | None
    gpu_seconds: Decimal
    utilized_gpu_seconds: float = 0.0  # GPU-seconds × utilization, over the hours with telemetry
    measured_gpu_seconds: float = 0.0  # GPU-seconds of the hours with telemetry

    @property
    def gpu_hours(self) -> Decimal:
        return self.gpu_seconds / SECONDS_PER_HOUR

    @property
    def utilized_gpu_hours(self) -> float:
        return self.utilized_gpu_seconds / 3600

    @property
    def efficiency(self) -> float | None:
        """Utilized / allocated over the hours with telemetry (0..1); None without telemetry."""
        return self.utilized_gpu_seconds / self.measured_gpu_seconds if self.measured_gpu_seconds else None


@dataclass(frozen=True, slots=True)
class RatedLine:
    """A usage line with its price per GPU-hour and its cost (rounded half-up to cents)."""

    usage: UsageLine
    rate: Decimal
    cost: Decimal
    currency: str

    def __getattr__(self, name):  # period, team, user, ... read through to the usage line
        return getattr(self.usage, name)


def rate_lines(lines: Iterable[UsageLine], cards: Iterable[RateCardVersion]) -> list[RatedLine]:
    """Price each line with the rate card version it was grouped under; unpriced lines cost 0.

    Rounding is cumulative per job, GPU model and card version, in period order: a line costs the rounded
    running total up to its period minus the rounded running total before it. So whatever the periods
    (hours, days, weeks, months), a job's lines over a range add up to its exact cost over that range
    rounded once, and every total built from lines agrees with the monthly chargeback; each line is still
    within a cent of its own exact cost."""
    by_version = {c.version: c for c in cards}
    lines = list(lines)
    priced = []
    for line in lines:
        card = by_version.get(line.card_version) if line.card_version is not None else None
        price = card.prices.get(line.gpu_model, Decimal(0)) if card else Decimal(0)
        priced.append((price, card.currency if card else "USD"))
    costs: list[Decimal] = [Decimal(0)] * len(lines)
    running: dict[tuple, tuple[Decimal, Decimal]] = {}  # (job, model, card) -> (exact so far, rounded so far)
    for i in sorted(range(len(lines)), key=lambda k: lines[k].period):
        line = lines[i]
        key = (line.job_id, line.gpu_model, line.card_version)
        exact, rounded = running.get(key, (Decimal(0), Decimal(0)))
        exact += unrounded_cost(line.gpu_seconds, priced[i][0])
        costs[i] = round_money(exact) - rounded
        running[key] = (exact, rounded + costs[i])
    return [RatedLine(usage=line, rate=price, cost=c, currency=currency)
            for line, (price, currency), c in zip(lines, priced, costs, strict=True)]
