"""Idle cost, as OpenCost defines it: capacity nobody was allocated, priced at the rate card, and a policy for
where it goes. Pure (no Django, no clock).

* **Capacity** GPU-seconds of a GPU model: each of its GPUs counts from when it joined the inventory until it
  left (the recorded history, ``accounting.capacity``), up to now for a running period; never before it
  existed. An allocation proves its GPU was there, so capacity is never less than what was allocated (the
  history may trail a registration by one rollup): capacity = allocated + idle, always.
* **Idle GPU-seconds** = capacity − allocated (ledger GPU-seconds of every team), per period, GPU model and
  rate card version; priced like usage, at the card in force (a card takes over at the first whole hour at or
  after its ``effective_from``, as the ledger's hourly rows do).
* **Policy** (``ROTA_IDLE_COST_POLICY``): ``hide`` leaves idle cost out; ``separate`` shows it as its own
  "idle" line (to those who see every team's cost: it is no team's cost); ``share`` hands it to the teams
  pro rata to their allocated cost over the range, in cents that add up exactly (largest remainder). With
  nothing allocated there is nothing to share by, and the idle cost stays a separate line.
"""

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import ROUND_DOWN, Decimal

from accounting.capacity import Step, integrate
from accounting.rating import CENT, RateBook, RateCardVersion, round_money, unrounded_cost

POLICIES = ("hide", "separate", "share")
DEFAULT_POLICY = "separate"
IDLE_TEAM = "(idle)"
_HOUR = timedelta(hours=1)


def check_policy(policy: str) -> str:
    if policy not in POLICIES:
        raise ValueError(f"idle cost policy must be one of {', '.join(POLICIES)}; got {policy!r}")
    return policy


@dataclass(frozen=True, slots=True)
class IdleLine:
    """Idle capacity of one GPU model in one period under one rate card version, and its price."""

    period: datetime
    gpu_model: str
    card_version: int | None
    capacity_gpus: int  # the most GPUs present at once
    capacity_gpu_seconds: Decimal  # = allocated + idle
    allocated_gpu_seconds: Decimal
    idle_gpu_seconds: Decimal
    rate: Decimal
    cost: Decimal  # unrounded; totals round once

    @property
    def idle_gpu_hours(self) -> Decimal:
        return self.idle_gpu_seconds / 3600


def _ceil_hour(at: datetime) -> datetime:
    floor = at.replace(minute=0, second=0, microsecond=0)
    return floor if floor == at else floor + _HOUR


def idle_lines(
    *,
    periods: Sequence[tuple[datetime, datetime, datetime]],
    capacity: Sequence[Step],
    allocated: Mapping[tuple[datetime, str, int | None], Decimal],
    cards: Iterable[RateCardVersion],
) -> list[IdleLine]:
    """Idle GPU-seconds and cost per (period, GPU model, card version), for each model with GPUs or allocations
    in the period.

    ``periods`` are ``(key, start, end)`` spans already clipped to the range, keyed by the period start the
    ledger groups by; ``capacity`` is GPUs per model as steps over the range (``accounting.capacity``);
    ``allocated`` is ledger GPU-seconds by (period key, model, card version)."""
    book = RateBook(cards)
    switches = sorted({_ceil_hour(c.effective_from) for c in book.cards})
    by_version = {c.version: c for c in book.cards}
    used: dict[datetime, list[tuple[str, int | None]]] = defaultdict(list)
    for key, model, version in allocated:
        used[key].append((model, version))
    out = []
    for key, lo, hi in periods:
        cuts = [lo, *(s for s in switches if lo < s < hi), hi]
        cap: dict[tuple[str, int | None], list] = {k: [Decimal(0), 0] for k in used.get(key, ())}
        for a, b in zip(cuts, cuts[1:], strict=False):
            card = book.card_at(a)
            version = card.version if card else None
            for model, (seconds, peak) in integrate(capacity, a, b).items():
                cell = cap.setdefault((model, version), [Decimal(0), 0])
                cell[0] += seconds
                cell[1] = max(cell[1], peak)
        for (model, version), (seconds, peak) in sorted(cap.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
            held = Decimal(allocated.get((key, model, version), 0))
            idle = max(seconds - held, Decimal(0))
            card = by_version.get(version)
            rate = card.prices.get(model, Decimal(0)) if card else Decimal(0)
            out.append(IdleLine(key, model, version, peak, held + idle, held, idle, rate, unrounded_cost(idle, rate)))
    return out


def share_pro_rata(total: Decimal, weights: Mapping[str, Decimal]) -> dict[str, Decimal]:
    """Split ``total`` (cents) over ``weights`` pro rata; the cents lost to rounding down go to the largest
    remainders (ties by name), so the parts add up to ``total`` exactly. Empty when the weights sum to 0."""
    positive = {k: w for k, w in weights.items() if w > 0}
    whole = sum(positive.values(), Decimal(0))
    if whole <= 0 or total <= 0:
        return {}
    exact = {k: total * w / whole for k, w in positive.items()}
    parts = {k: v.quantize(CENT, rounding=ROUND_DOWN) for k, v in exact.items()}
    left = int((total - sum(parts.values(), Decimal(0))) / CENT)
    for k in sorted(exact, key=lambda k: (-(exact[k] - parts[k]), k))[:left]:
        parts[k] += CENT
    return parts


@dataclass(frozen=True, slots=True)
class IdleReport:
    """Idle cost under a policy: ``separate`` is the amount shown as its own line, ``shares`` what each team
    was handed (only the teams the reader may see), ``total`` the whole idle cost (rounded to cents)."""

    policy: str
    lines: list[IdleLine] = field(default_factory=list)
    total: Decimal = Decimal(0)
    separate: Decimal = Decimal(0)
    shares: dict[str, Decimal] = field(default_factory=dict)
    currency: str = "USD"

    @property
    def idle_gpu_hours(self) -> Decimal:
        return sum((ln.idle_gpu_hours for ln in self.lines), Decimal(0))

    @property
    def shows_line(self) -> bool:
        """Whether an "idle" line of its own is shown (never to a reader who sees only some teams)."""
        return bool(self.lines) and not self.shares

    def by_model(self) -> list[tuple[str, int, Decimal, Decimal, Decimal]]:
        """(GPU model, most GPUs at once, idle GPU-hours, capacity GPU-hours, cost) per model, by model name."""
        acc: dict[str, list] = {}
        for ln in self.lines:
            row = acc.setdefault(ln.gpu_model, [0, Decimal(0), Decimal(0), Decimal(0)])
            row[0] = max(row[0], ln.capacity_gpus)
            row[1] += ln.idle_gpu_hours
            row[2] += ln.capacity_gpu_seconds / 3600
            row[3] += ln.cost
        return [(m, r[0], r[1], r[2], round_money(r[3])) for m, r in sorted(acc.items())]

    def by_model_version(self) -> list[tuple[str, int | None, int, Decimal, Decimal, Decimal]]:
        """(GPU model, card version, most GPUs at once, idle GPU-hours, rate, cost) per model and card, for export
        rows."""
        acc: dict[tuple, list] = {}
        for ln in self.lines:
            row = acc.setdefault((ln.gpu_model, ln.card_version), [0, Decimal(0), ln.rate, Decimal(0)])
            row[0] = max(row[0], ln.capacity_gpus)
            row[1] += ln.idle_gpu_hours
            row[3] += ln.cost
        return [
            (m, v, r[0], r[1], r[2], round_money(r[3]))
            for (m, v), r in sorted(acc.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0))
        ]

    def for_teams(self, teams: Iterable[str]) -> "IdleReport":
        """What a reader who sees only ``teams`` gets: their shares, no separate idle line."""
        keep = set(teams)
        shares = {t: c for t, c in self.shares.items() if t in keep}
        return IdleReport(self.policy, [], Decimal(0), Decimal(0), shares, self.currency)


def idle_report(
    *,
    policy: str,
    lines: list[IdleLine],
    team_costs: Mapping[str, Decimal],
    visible_teams: Iterable[str] | None,
    currency: str = "USD",
) -> IdleReport:
    """Apply ``policy`` to the idle ``lines``. ``team_costs`` is every team's allocated cost in the range (the
    shares depend on all of them); ``visible_teams`` limits what the reader gets (None: everything, including
    the separate line, which only readers of every team's cost see)."""
    check_policy(policy)
    total = round_money(sum((ln.cost for ln in lines), Decimal(0)))
    if policy == "hide":
        return IdleReport(policy, [], Decimal(0), Decimal(0), {}, currency)
    shares = share_pro_rata(total, team_costs) if policy == "share" else {}
    report = IdleReport(policy, lines, total, total if not shares else Decimal(0), shares, currency)
    return report if visible_teams is None else report.for_teams(visible_teams)
