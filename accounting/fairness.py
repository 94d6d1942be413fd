"""The fairness statement: what each team was entitled to, what it received, and how long it waited below its
guarantee. Pure (no Django, no clock): the selector hands in plain numbers and intervals.

Method, in full, so a "we paid but did not get our share" question has an answer a person can check:

* **Capacity** of a GPU model at a moment is the number of GPUs of that model in the inventory then (each GPU
  counts from the registration that added it until it left, never past now: ``accounting.capacity``). It
  comes in as steps, stretches of the period over which it is constant.
* **Entitled GPUs** of a team on a model = its guarantee + its weighted share of the capacity no one is
  guaranteed: ``g + (capacity - Σg)₊ × w / Σw`` over the teams with a quota on that model. If guarantees add
  up to more than the capacity they are scaled down pro rata, so entitlements on a model always add up to
  its capacity (when any team has a quota there): with no GPUs (before any existed) nobody is entitled to
  any. A team's several quota rows on one model (per pool) add their guarantees and keep the largest
  weight. This is the static entitlement: what the team gets when every team wants all it may have; a team
  that asks for less leaves the rest for others.
* **Entitled GPU-hours** = entitled GPUs integrated over the period (up to now for a period still running),
  step by step; **received GPU-hours** come from the usage ledger (the same numbers as the chargeback). A
  line's capacity, guarantee and entitled GPUs are averages over the hours its model had GPUs (``hours``),
  so entitled GPU-hours = entitled GPUs × those hours.
* **Waiting below entitlement**: the time in the period during which the team had at least one job waiting
  (pending or held, from the recorded job transitions) while the GPUs it held (allocations, fractions by
  share, every model together) added up to less than its guarantee then (every model together, scaled to the
  capacity of the moment). Teams with no guarantee never wait below it. The **shortfall** is the integral of
  ``guarantee - held`` over that time, in GPU-hours: the share the team waited for and did not get.
"""

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

Interval = tuple[datetime, datetime]
HeldInterval = tuple[datetime, datetime, float]  # [start, end) holding this many GPUs
Step = tuple[datetime, datetime, Mapping[str, float]]  # [start, end) with this many GPUs per model
EPSILON = 1e-9


@dataclass(frozen=True, slots=True)
class QuotaTerm:
    """One quota row: a team's guaranteed GPUs and weight on one GPU model."""

    team: str
    gpu_model: str
    guaranteed: float
    weight: float


@dataclass(frozen=True, slots=True)
class Entitlement:
    """A team's entitled GPUs on one GPU model: its (possibly scaled) guarantee plus its share of the rest."""

    team: str
    gpu_model: str
    capacity: float
    guaranteed: float  # after scaling to the capacity when guarantees are oversubscribed
    weight: float
    idle_share: float

    @property
    def gpus(self) -> float:
        return self.guaranteed + self.idle_share


def entitlements(capacity: Mapping[str, float], quotas: Iterable[QuotaTerm]) -> list[Entitlement]:
    """Entitled GPUs per (team, GPU model), by model then team name."""
    guaranteed: dict[tuple[str, str], float] = defaultdict(float)
    weight: dict[tuple[str, str], float] = {}
    for q in quotas:
        key = (q.gpu_model, q.team)
        guaranteed[key] += max(q.guaranteed, 0.0)
        weight[key] = max(weight.get(key, 0.0), max(q.weight, 0.0))
    out = []
    for model in sorted({m for m, _ in weight}):
        keys = sorted(k for k in weight if k[0] == model)
        cap = max(float(capacity.get(model, 0.0)), 0.0)
        total_g = sum(guaranteed[k] for k in keys)
        scale = min(1.0, cap / total_g) if total_g > 0 else 1.0
        spare = max(cap - total_g, 0.0)
        total_w = sum(weight[k] for k in keys)
        for k in keys:
            share = spare * weight[k] / total_w if total_w > 0 else 0.0
            out.append(Entitlement(k[1], model, cap, guaranteed[k] * scale, weight[k], share))
    return out


@dataclass(frozen=True, slots=True)
class WaitBelow:
    """Seconds with a job waiting, seconds of that below the guarantee, and the shortfall (GPU-seconds)."""

    waiting_s: float = 0.0
    below_s: float = 0.0
    shortfall_gpu_s: float = 0.0


def wait_below_guarantee(
    *,
    start: datetime,
    end: datetime,
    guarantee: float | Sequence[HeldInterval],
    waiting: Sequence[Interval],
    held: Sequence[HeldInterval],
) -> WaitBelow:
    """Sweep ``[start, end)``: at each moment, does the team have a job waiting, and does it hold less than
    its guarantee? ``guarantee`` is a number of GPUs for the whole period or ``(from, to, GPUs)`` steps (none
    outside them). Intervals are clipped to the period; overlapping waits count once."""
    if not isinstance(guarantee, Sequence):
        guarantee = [(start, end, float(guarantee))]
    events: dict[datetime, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])  # moment -> [Δwaiting, Δheld, Δg]
    for column, intervals in ((1, held), (2, guarantee)):
        for lo, hi, gpus in intervals:
            lo, hi = max(lo, start), min(hi, end)
            if hi > lo and gpus:
                events[lo][column] += gpus
                events[hi][column] -= gpus
    for lo, hi in waiting:
        lo, hi = max(lo, start), min(hi, end)
        if hi > lo:
            events[lo][0] += 1
            events[hi][0] -= 1
    waiting_s = below_s = shortfall = 0.0
    n_waiting, n_held, owed = 0.0, 0.0, 0.0
    moments = sorted(events)
    for at, nxt in zip(moments, moments[1:], strict=False):
        n_waiting += events[at][0]
        n_held += events[at][1]
        owed += events[at][2]
        if n_waiting > 0.5:
            dt = (nxt - at).total_seconds()
            waiting_s += dt
            if n_held < owed - EPSILON:
                below_s += dt
                shortfall += (owed - n_held) * dt
    return WaitBelow(waiting_s, below_s, shortfall)


@dataclass(frozen=True, slots=True)
class FairnessLine:
    """One team on one GPU model: entitled vs received GPU-hours."""

    gpu_model: str
    capacity: float  # GPUs of the model, on average over ``hours``
    guaranteed: float  # the team's guarantee after scaling, on average over ``hours``
    weight: float
    entitled_gpus: float  # on average over ``hours``
    entitled_gpu_hours: float
    received_gpu_hours: float
    hours: float = 0.0  # hours of the period during which the model had GPUs
    # Of the received GPU-hours, the work preemption threw away (since the victims' last checkpoints): credited
    # back, in fair share and chargeback (``accounting.credits``), so not counted against the team.
    lost_gpu_hours: float = 0.0

    @property
    def received_ratio(self) -> float | None:
        """Received / entitled (1.0 = got exactly its share); None when not entitled to anything."""
        return self.received_gpu_hours / self.entitled_gpu_hours if self.entitled_gpu_hours > 0 else None


@dataclass(frozen=True, slots=True)
class TeamFairness:
    """A team's fairness statement for one period."""

    team: str
    hours: float
    guaranteed: float
    lines: list[FairnessLine] = field(default_factory=list)
    waiting_hours: float = 0.0
    below_hours: float = 0.0
    shortfall_gpu_hours: float = 0.0

    @property
    def entitled_gpu_hours(self) -> float:
        return sum(ln.entitled_gpu_hours for ln in self.lines)

    @property
    def received_gpu_hours(self) -> float:
        return sum(ln.received_gpu_hours for ln in self.lines)

    @property
    def lost_gpu_hours(self) -> float:
        return sum(ln.lost_gpu_hours for ln in self.lines)

    @property
    def received_ratio(self) -> float | None:
        e = self.entitled_gpu_hours
        return self.received_gpu_hours / e if e > 0 else None


def fairness_statement(
    *,
    start: datetime,
    end: datetime,
    teams: Iterable[str],
    capacity: Sequence[Step],
    quotas: Iterable[QuotaTerm],
    received_gpu_s: Mapping[tuple[str, str], float],
    waiting: Mapping[str, Sequence[Interval]],
    held: Mapping[str, Sequence[HeldInterval]],
    lost_gpu_s: Mapping[tuple[str, str], float] | None = None,
) -> list[TeamFairness]:
    """The statement for ``teams`` over ``[start, end)`` (pass ``end`` = now for a running period).

    ``capacity`` is GPUs per model as steps (``accounting.capacity.capacity_steps``; no GPUs where no step
    covers); ``quotas`` are every team's (the idle share depends on everyone's weights); ``received_gpu_s`` is
    ledger GPU-seconds by (team, GPU model), ``lost_gpu_s`` the work preemption lost of it, credited."""
    lost_gpu_s = lost_gpu_s or {}
    hours = max((end - start).total_seconds(), 0.0) / 3600
    quotas = list(quotas)
    # per (team, model with a quota): [guaranteed GPU-s, entitled GPU-s, weight]; per model: the seconds it had
    # GPUs and its GPU-seconds
    acc = {(e.team, e.gpu_model): [0.0, 0.0, e.weight] for e in entitlements({}, quotas)}
    model_s: dict[str, float] = defaultdict(float)
    model_gpu_s: dict[str, float] = defaultdict(float)
    owed: dict[str, list[HeldInterval]] = defaultdict(list)
    for lo, hi, gpus in _covering(capacity, start, end):
        dt = (hi - lo).total_seconds()
        for model, n in gpus.items():
            if n > 0:
                model_s[model] += dt
                model_gpu_s[model] += n * dt
        team_g: dict[str, float] = defaultdict(float)
        for e in entitlements(gpus, quotas):
            cell = acc[(e.team, e.gpu_model)]
            cell[0] += e.guaranteed * dt
            cell[1] += e.gpus * dt
            team_g[e.team] += e.guaranteed
        for team, g in team_g.items():
            owed[team].append((lo, hi, g))
    out = []
    for team in sorted(set(teams)):
        models = sorted({m for t, m in acc if t == team} | {m for t, m in received_gpu_s if t == team}
                        | {m for t, m in lost_gpu_s if t == team})
        lines = []
        for m in models:
            g_s, ent_s, weight = acc.get((team, m), (0.0, 0.0, 0.0))
            span = model_s.get(m, 0.0)
            lines.append(
                FairnessLine(
                    gpu_model=m,
                    capacity=model_gpu_s[m] / span if span else 0.0,
                    guaranteed=g_s / span if span else 0.0,
                    weight=weight,
                    entitled_gpus=ent_s / span if span else 0.0,
                    entitled_gpu_hours=ent_s / 3600,
                    received_gpu_hours=float(received_gpu_s.get((team, m), 0.0)) / 3600,
                    hours=span / 3600,
                    lost_gpu_hours=float(lost_gpu_s.get((team, m), 0.0)) / 3600,
                )
            )
        wait = wait_below_guarantee(
            start=start, end=end, guarantee=owed.get(team, []), waiting=waiting.get(team, ()), held=held.get(team, ())
        )
        out.append(
            TeamFairness(
                team=team,
                hours=hours,
                guaranteed=sum(ln.guaranteed for ln in lines),
                lines=lines,
                waiting_hours=wait.waiting_s / 3600,
                below_hours=wait.below_s / 3600,
                shortfall_gpu_hours=wait.shortfall_gpu_s / 3600,
            )
        )
    return out


def _covering(steps: Sequence[Step], start: datetime, end: datetime) -> list[Step]:
    """``steps`` clipped to ``[start, end)``, with the gaps between them filled with no GPUs."""
    out: list[Step] = []
    at = start
    for lo, hi, gpus in sorted(steps, key=lambda s: s[0]):
        lo, hi = max(lo, start), min(hi, end)
        if hi <= lo:
            continue
        if lo > at:
            out.append((at, lo, {}))
        out.append((lo, hi, gpus))
        at = max(at, hi)
    if at < end:
        out.append((at, end, {}))
    return out
