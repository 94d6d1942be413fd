"""Reads for the fairness statement, idle cost and the queue charts, in a fixed number of queries.

Tenancy as in ``accounting.selectors``: rows are limited to the teams the user may see. Two inputs are
cluster-wide aggregates by nature (every team's quotas, for the idle share of an entitlement; every team's
allocated GPU-seconds and cost, for idle capacity and its pro-rata share); they are used in the arithmetic
and never returned per team to a reader who may not see that team.
"""

from collections import defaultdict
from datetime import datetime
from decimal import Decimal

from django.core.exceptions import EmptyResultSet
from django.db import connections
from django.db.models import Count, F, Min, Q, QuerySet, Sum, Window
from django.db.models.functions import Lead

from accounting.capacity import Presence, Step, capacity_steps
from accounting.fairness import QuotaTerm, TeamFairness, fairness_statement
from accounting.models import GpuPresence, UsageDay, UsageRecord
from accounting.selectors import TRUNCS, _aware, card_version, ledger_spans
from portal.access import cost_teams_for, sees_all_costs
from portal.dbrows import fast_timestamps, fetch_rows, one_snapshot
from portal.models import Team
from scheduler.models import Allocation, Job, JobTransition, Quota
from scheduler.models.jobs import FINAL_STATES, WAITING_STATES, JobState
from scheduler.selectors_lost_work import lost_work_by_team_model

FAILED_STATES = (JobState.FAILED, JobState.TIMED_OUT, JobState.NODE_LOST)


def visible_team_names(user) -> set[str] | None:
    """Names of the teams ``user`` sees costs of; None when they see every team (no query then)."""
    if sees_all_costs(user):
        return None
    return set(cost_teams_for(user).values_list("name", flat=True))


def _teams(visible: set[str] | None) -> QuerySet[Team]:
    return Team.objects.all() if visible is None else Team.objects.filter(name__in=visible)


def capacity_over(*, start: datetime, end: datetime) -> list[Step]:
    """GPUs present per GPU model over ``[start, end)`` as steps (``accounting.capacity.capacity_steps``), from
    the recorded inventory history: each GPU counts only while it was there (MIG slices count as GPUs of their
    own model). Pass ``end`` = now for a range still running. One query."""
    rows = (
        GpuPresence.objects.filter(since__lt=end)
        .filter(Q(until__isnull=True) | Q(until__gt=start))
        .values_list("gpu_model__name", "since", "until")
    )
    return capacity_steps((Presence(m, since, until) for m, since, until in rows), start, end)


def waiting_intervals(visible: set[str] | None, *, start: datetime, horizon: datetime) -> list[tuple]:
    """``(team, from, to)`` for every stretch a job of a visible team spent pending or held, from its recorded
    transitions (a stretch runs to the job's next transition, or to ``horizon`` if there is none), for jobs
    not finished before ``start``. Unclipped. One query: the stretches are picked out in the database, after
    the window has paired each transition with the next (a job's history is mostly not waiting: of its five
    or so transitions one is)."""
    inner = (
        JobTransition.objects.filter(job__team__in=_teams(visible), at__lt=horizon)
        .filter(Q(job__finished_at__isnull=True) | Q(job__finished_at__gte=start))
        .annotate(next_at=Window(Lead("at"), partition_by=[F("job_id")], order_by=[F("at").asc(), F("id").asc()]))
        .values_list("job__team__name", "to_state", "at", "next_at")
        .order_by()
    )
    try:
        sql, params = inner.query.sql_with_params()
    except EmptyResultSet:  # no visible team
        return []
    waiting = sorted(str(s) for s in WAITING_STATES)
    query = (f'SELECT w."job__team__name", w."at", w."next_at" FROM ({sql}) w '
             f'WHERE w."to_state" IN ({", ".join(["%s"] * len(waiting))}) '
             'AND (w."next_at" IS NULL OR w."next_at" > %s)')
    with connections[inner.db].cursor() as cursor:
        fast_timestamps(cursor)
        cursor.execute(query, (*params, *waiting, start))
        rows = cursor.fetchall()
    out = [(team, _aware(at), _aware(nxt) if nxt is not None else horizon) for team, at, nxt in rows]
    return [row for row in out if row[2] > start]  # a stretch still open counts only if the horizon is past start


def held_intervals(visible: set[str] | None, *, start: datetime, horizon: datetime) -> dict[str, list]:
    """Per team, ``(from, to, GPUs)`` of its allocations overlapping ``[start, horizon)`` (open ones run to
    ``horizon``; a fraction counts its share). One query."""
    out: dict[str, list] = defaultdict(list)
    rows = fetch_rows(
        Allocation.objects.filter(job__team__in=_teams(visible), started_at__lt=horizon)
        .exclude(ended_at__lte=start)
        .values_list("job__team__name", "started_at", "ended_at", "share_milli")
    )
    for team, lo, hi, share in rows:
        out[team].append((lo, hi or horizon, share / 1000))
    return out


def quota_terms() -> list[QuotaTerm]:
    """Every team's quota rows (the idle share of an entitlement depends on all the weights). One query."""
    return [
        QuotaTerm(team=t, gpu_model=m, guaranteed=float(g), weight=float(w))
        for t, m, g, w in Quota.objects.values_list("team__name", "gpu_model__name", "guaranteed", "weight")
    ]


def received_gpu_seconds(visible: set[str] | None, *, start: datetime, end: datetime) -> dict[tuple[str, str], float]:
    """Ledger GPU-seconds in ``[start, end)`` per (team, GPU model) of the visible teams. One query."""
    rows = (
        UsageRecord.objects.filter(team__in=_teams(visible), period_start__gte=start, period_start__lt=end)
        .values("team__name", "gpu_model__name")
        .annotate(s=Sum("gpu_seconds"))
    )
    return {(r["team__name"], r["gpu_model__name"]): float(r["s"]) for r in rows}


def fairness_for(
    visible: set[str] | None,
    *,
    start: datetime,
    end: datetime,
    now: datetime,
    waiting: list[tuple] | None = None,
    capacity: list[Step] | None = None,
    allocated: list[tuple] | None = None,
) -> list[TeamFairness]:
    """The fairness statement of the visible teams with a quota or usage in ``[start, end)``, counted up to
    ``now`` for a running period. Six queries (one for the work preemption lost), one fewer for each of
    ``waiting`` (from ``waiting_intervals``), ``capacity`` (from ``capacity_over`` up to ``min(end, now)``) and
    ``allocated`` (the rows of ``cluster_allocated`` for the same range) passed in."""
    horizon = min(end, now)
    if horizon <= start:
        return []
    quotas = quota_terms()
    if allocated is None:
        received = received_gpu_seconds(visible, start=start, end=end)
    else:
        received = defaultdict(float)
        for _period, team, model, _card, seconds in allocated:
            if visible is None or team in visible:
                received[(team, model)] += float(seconds)
    if waiting is None:
        waiting = waiting_intervals(visible, start=start, horizon=horizon)
    by_team: dict[str, list] = defaultdict(list)
    for team, lo, hi in waiting:
        by_team[team].append((lo, hi))
    teams = {q.team for q in quotas} | {t for t, _ in received}
    if visible is not None:
        teams &= visible
    return fairness_statement(
        start=start,
        end=horizon,
        teams=teams,
        capacity=capacity_over(start=start, end=horizon) if capacity is None else capacity,
        quotas=quotas,
        received_gpu_s=received,
        waiting=by_team,
        held=held_intervals(visible, start=start, horizon=horizon),
        lost_gpu_s=lost_work_by_team_model(visible, start=start, end=horizon),
    )


def cluster_allocated(
    *, start: datetime, end: datetime, agg: str
) -> list[tuple[datetime, str, str, int | None, Decimal]]:
    """Every team's ledger GPU-seconds in ``[start, end)`` as ``(period, team, GPU model, card version,
    GPU-seconds)``: the cluster-wide input of idle cost. One query over the ledger's spans (``ledger_spans``)."""
    trunc = TRUNCS[agg]
    parts = []
    with one_snapshot():  # the watermark and the days it covers, as of one moment
        for summed, a, b in ledger_spans(start, end, agg):  # one query: the spans' sums, united
            if summed:  # whole days the rollup has summed (periods local and naive, as the hourly ones)
                rows = UsageDay.objects.filter(day__gte=a, day__lt=b).annotate(period=trunc("day"), card_v=F("card"))
            else:
                rows = UsageRecord.objects.filter(period_start__gte=a, period_start__lt=b).annotate(
                    period=trunc("period_start") if trunc else F("period_start"), card_v=card_version())
            parts.append(rows.values("team__name", "gpu_model__name", "period", "card_v")
                         .annotate(s=Sum("gpu_seconds")).order_by())
        found = list(parts[0].union(*parts[1:], all=True) if len(parts) > 1 else parts[0])
    sums: dict[tuple, Decimal] = {}
    for r in found:
        key = (_aware(r["period"]), r["team__name"], r["gpu_model__name"], r["card_v"])
        sums[key] = sums.get(key, Decimal(0)) + r["s"]
    return [(*key, gs) for key, gs in sums.items()]


def wait_seconds(visible: set[str] | None, *, start: datetime, end: datetime) -> dict[str, list[float]]:
    """Per team, seconds from submission to first admission of the jobs submitted in ``[start, end)`` and
    admitted at least once (jobs still waiting for their first admission are left out). One query."""
    rows = fetch_rows(
        Job.objects.filter(team__in=_teams(visible), created_at__gte=start, created_at__lt=end)
        .annotate(first=Min("transitions__at", filter=Q(transitions__to_state=JobState.ADMITTED)))
        .filter(first__isnull=False)
        .values_list("team__name", "created_at", "first")
    )
    out: dict[str, list[float]] = defaultdict(list)
    for team, created, first in rows:
        out[team].append(max((first - created).total_seconds(), 0.0))
    return dict(out)


def failure_counts(visible: set[str] | None, *, start: datetime, end: datetime) -> dict[str, tuple[int, int]]:
    """Per team, ``(failed, finished)`` of the jobs that finished in ``[start, end)``: finished is any final
    state, failed is failed, timed-out or node-lost (cancelled jobs count as finished, not failed). One query."""
    rows = (
        Job.objects.filter(
            team__in=_teams(visible), state__in=FINAL_STATES, finished_at__gte=start, finished_at__lt=end
        )
        .values("team__name")
        .annotate(n=Count("id"), failed=Count("id", filter=Q(state__in=FAILED_STATES)))
    )
    return {r["team__name"]: (r["failed"], r["n"]) for r in rows}
