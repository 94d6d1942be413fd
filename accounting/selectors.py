"""Reads for accounting, tenancy applied first: every query starts from the teams the user may see.

Members see their teams' usage and cost (other people's rows under "(other members)"); team-admins also see
their team's users; platform admins see everything. Selectors return
plain data (``UsageLine``, ``RateCardVersion``) for the pure rating and chart modules, in a fixed, small
number of queries.
"""

from dataclasses import dataclass, replace
from datetime import datetime, time, timedelta
from decimal import Decimal

from django.contrib.auth import get_user_model
from django.db import connections
from django.db.models import (
    Avg,
    Case,
    Count,
    F,
    FloatField,
    IntegerField,
    OuterRef,
    QuerySet,
    Subquery,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Cast, Coalesce, TruncDay, TruncMonth, TruncWeek
from django.http import Http404
from django.utils import timezone

from accounting.models import Budget, RateCard, RollupState, UsageDay, UsageRecord
from accounting.rating import RateCardVersion, UsageLine
from accounting.slicing import HOUR
from portal.access import cost_teams_for, sees_all_costs
from portal.dbrows import fast_timestamps, one_snapshot
from portal.models import Membership, Team
from scheduler.models import GpuModel, GpuSample, GpuSampleRollup, Job, Pool, Preemption

TRUNCS = {"hour": None, "day": TruncDay, "week": TruncWeek, "month": TruncMonth}


def team_for(user, name: str) -> Team:
    """Team ``name`` if ``user`` may see it, else Http404 (the same answer as for a missing team)."""
    team = cost_teams_for(user).filter(name=name).first()
    if team is None:
        raise Http404("No such team")
    return team


def rate_cards() -> list[RateCardVersion]:
    """Every rate card version with its prices (two queries)."""
    return [
        RateCardVersion(
            version=c.version,
            effective_from=c.effective_from,
            currency=c.currency,
            prices={e.gpu_model.name: e.price_per_gpu_hour for e in c.entries.all()},
        )
        for c in RateCard.objects.prefetch_related("entries__gpu_model").order_by("effective_from")
    ]


def card_version():
    """The version of the rate card in force at each row's ``period_start`` (NULL before the first card): a
    CASE over the cards, newest first, read in one small query (a subquery per ledger row cost about a
    microsecond each, a tenth of a month's report)."""
    cards = list(RateCard.objects.order_by("-effective_from").values_list("effective_from", "version"))
    if not cards:
        return Cast(Value(None), IntegerField())  # typed: a bare NULL parameter is text to PostgreSQL
    return Case(*(When(period_start__gte=since, then=Value(version)) for since, version in cards),
                default=None, output_field=IntegerField())


def usage_lines(user, *, start: datetime, end: datetime, agg: str = "day", team: Team | None = None) -> list[UsageLine]:
    """Ledger GPU-seconds in ``[start, end)`` the user may see, summed per ``agg`` period (hour, day, week,
    month), job, GPU model and rate card version. Two queries.

    Per-person detail is for team-admins: in a team where ``user`` is a plain member, other people's rows
    keep their job but show the user as ``OTHER_MEMBERS``."""
    teams = None if sees_all_costs(user) else cost_teams_for(user)
    if team is not None:
        teams = Team.objects.filter(pk=team.pk) if teams is None else teams.filter(pk=team.pk)
    lines = _lines(teams, start=start, end=end, agg=agg)
    masked = _member_only_teams(user)
    if not masked:
        return lines
    me = user.get_username()
    return [replace(ln, user=OTHER_MEMBERS) if ln.team in masked and ln.user != me else ln for ln in lines]


OTHER_MEMBERS = "(other members)"


def _member_only_teams(user) -> set[str]:
    """Teams where ``user`` is a plain member (not team-admin); none for platform admins."""
    if not user.is_authenticated or sees_all_costs(user):
        return set()
    roles: dict[str, set[str]] = {}
    for name, role in Membership.objects.filter(user=user).values_list("team__name", "role"):
        roles.setdefault(name, set()).add(role)
    return {name for name, r in roles.items() if Membership.TEAM_ADMIN not in r}


def team_usage_lines(team: Team, *, start: datetime, end: datetime, agg: str = "month") -> list[UsageLine]:
    """One team's usage lines, for system work (stored statements) that acts for no user."""
    return _lines(Team.objects.filter(pk=team.pk), start=start, end=end, agg=agg)


def teams_with_usage(*, start: datetime, end: datetime) -> list[Team]:
    """Teams with ledger rows in ``[start, end)``."""
    ids = UsageRecord.objects.filter(period_start__gte=start, period_start__lt=end).values("team_id")
    return list(Team.objects.filter(pk__in=ids).select_related("parent"))


def _utilization():
    """Average GPU utilization (%) of the row's device for its job in its hour: the telemetry rollup when the
    raw samples are gone, else the raw samples; NULL without telemetry."""
    rolled = GpuSampleRollup.objects.filter(
        gpu_id=OuterRef("allocation__gpu_id"), job_id=OuterRef("job_id"), hour=OuterRef("period_start")
    ).values("util_avg")[:1]
    raw = (
        GpuSample.objects.filter(
            gpu_id=OuterRef("allocation__gpu_id"),
            job_id=OuterRef("job_id"),
            at__gte=OuterRef("period_start"),
            at__lt=OuterRef("period_start") + HOUR,
        )
        .values("gpu_id")
        .annotate(a=Avg("util_pct"))
        .values("a")[:1]
    )
    return Coalesce(Subquery(rolled, output_field=FloatField()), Subquery(raw, output_field=FloatField()))


KEYS = ("period", "card", "job_id", "kind", "team_id", "user_id", "gpu_model_id", "pool_id")


def hourly_sums_sql(qs: QuerySet[UsageRecord], *, start: datetime, end: datetime,
                    agg: str) -> tuple[str, tuple]:
    """SQL that sums the hourly ledger rows of ``qs`` in ``[start, end)`` per ``KEYS`` (the period truncated to
    ``agg``) into ``gs``, ``utilized`` and ``measured``: GPU-seconds, those weighted by utilization, those with
    telemetry.

    The inner query gives each row its period, card and utilization (two correlated subqueries) and is fenced
    (``OFFSET 0``) so PostgreSQL works the utilization out once per row instead of once per sum; the sum is a
    hash aggregate over integers, not a sort over names."""
    trunc = TRUNCS[agg]
    inner = (
        qs.filter(period_start__gte=start, period_start__lt=end)
        .annotate(period=trunc("period_start") if trunc else F("period_start"), card=card_version(),
                  util=_utilization(), gsf=Cast("gpu_seconds", FloatField()))
        .values(*KEYS, "util", "gsf", "gpu_seconds")
        .order_by()  # no sort inside: the outer query groups and orders
    )
    sql, params = inner.query.sql_with_params()
    fence = " OFFSET 0" if connections[qs.db].vendor == "postgresql" else ""
    keys = ", ".join(f'r."{k}"' for k in KEYS)
    return (f"SELECT {keys}, SUM(r.gpu_seconds) AS gs, SUM(r.gsf * r.util / 100.0) AS utilized, "
            "SUM(CASE WHEN r.util IS NOT NULL THEN r.gsf ELSE 0.0 END) AS measured "
            f"FROM ({sql}{fence}) r GROUP BY {keys}"), tuple(params)


def _daily_sums_sql(qs: QuerySet[UsageDay], *, start: datetime, end: datetime, agg: str) -> tuple[str, tuple]:
    """The same sums as ``hourly_sums_sql``, read from the days the rollup has summed (``UsageDay``)."""
    period = TRUNCS[agg]("day")  # (local and naive, as the hourly rows' periods are)
    sql, params = (
        qs.filter(day__gte=start, day__lt=end)
        .annotate(period=period, gs=F("gpu_seconds"), utilized=F("utilized_gpu_seconds"),
                  measured=F("measured_gpu_seconds"))
        .values(*KEYS, "gs", "utilized", "measured")
        .order_by()
        .query.sql_with_params()
    )
    return sql, tuple(params)


def day_floor(at: datetime) -> datetime:
    """The start of ``at``'s day in the portal's time zone (``settings.TIME_ZONE``: what ``TruncDay`` gives)."""
    local = timezone.localtime(at, timezone.get_default_timezone())
    return datetime.combine(local.date(), time(), tzinfo=local.tzinfo)


def _day_ceil(at: datetime) -> datetime:
    floor = day_floor(at)
    return floor if floor == at else day_floor(floor + timedelta(hours=36))


def days_key() -> str:
    """The watermark of the summed days: days are of the portal's time zone, so another zone starts afresh."""
    return f"usage-days@{timezone.get_default_timezone_name()}"


def days_summed_until() -> datetime | None:
    """Up to where whole days of the ledger are summed in ``UsageDay`` (None: none are, or this reading is in
    a time zone other than the portal's, whose days they are)."""
    if timezone.get_current_timezone_name() != timezone.get_default_timezone_name():
        return None
    return RollupState.objects.filter(key=days_key()).values_list("rolled_until", flat=True).first()


def ledger_spans(start: datetime, end: datetime, agg: str) -> list[tuple[bool, datetime, datetime]]:
    """``[start, end)`` cut into spans to read from the summed days (True) or the hourly rows (False): whole
    summed days from ``UsageDay`` unless the reading is by hour, the hours around them from ``UsageRecord``."""
    summed = days_summed_until() if agg != "hour" else None
    if summed is not None:
        first, last = _day_ceil(start), min(day_floor(end), summed)
        if first < last:
            spans = [(False, start, first)] if start < first else []
            spans.append((True, first, last))
            return spans + ([(False, last, end)] if last < end else [])
    return [(False, start, end)]


def _lines(teams: QuerySet[Team] | None, *, start: datetime, end: datetime, agg: str) -> list[UsageLine]:
    """Ledger GPU-seconds of ``teams`` (None: every team) in ``[start, end)`` summed per period, job, GPU model
    and rate card version, with the GPU-seconds weighted by utilization.

    Whole days the rollup has summed come from ``UsageDay`` (unless the lines are by hour); the hours before
    and after them from the hourly rows. The two parts are summed together per line, then named: names are
    joined to the few summed lines, not to every row."""
    hourly: QuerySet[UsageRecord] = UsageRecord.objects.all()
    daily: QuerySet[UsageDay] = UsageDay.objects.all()
    if teams is not None:
        hourly, daily = hourly.filter(team__in=teams), daily.filter(team__in=teams)
    with one_snapshot(hourly.db):  # the watermark and the days it covers, as of one moment
        parts = [(_daily_sums_sql(daily, start=a, end=b, agg=agg) if summed else hourly_sums_sql(
            hourly, start=a, end=b, agg=agg)) for summed, a, b in ledger_spans(start, end, agg)]
        rows = _fetch_lines(hourly.db, parts)
    return [_line(row) for row in rows]


def _fetch_lines(db: str, parts: list[tuple[str, tuple]]) -> list[tuple]:
    """Sum the parts' sums per line, then name the lines: names are joined to the few summed lines, not to
    every row."""
    connection = connections[db]
    params: tuple = sum((p for _sql, p in parts), ())
    keys = ", ".join(f'u."{k}"' for k in KEYS)
    columns = ", ".join(f'"{k}"' for k in (*KEYS, "gs", "utilized", "measured"))
    union = " UNION ALL ".join(f"SELECT {columns} FROM ({sql}) p{i}" for i, (sql, _p) in enumerate(parts))
    table = {m: m._meta.db_table for m in (Team, Job, GpuModel, Pool, get_user_model())}
    query = (
        'SELECT s."period", s."card", s."job_id", s."kind", t."name", d."name", u."username", j."name", j."gpus", '
        'j."gpu_fraction", m."name", p."name", s.gs, s.utilized, s.measured '
        f"FROM (SELECT {keys}, SUM(u.gs) AS gs, SUM(u.utilized) AS utilized, SUM(u.measured) AS measured "
        f"FROM ({union}) u GROUP BY {keys}) s "
        f'LEFT JOIN "{table[Team]}" t ON t."id" = s."team_id" '
        f'LEFT JOIN "{table[Team]}" d ON d."id" = t."parent_id" '
        f'LEFT JOIN "{table[get_user_model()]}" u ON u."id" = s."user_id" '
        f'LEFT JOIN "{table[Job]}" j ON j."id" = s."job_id" '
        f'LEFT JOIN "{table[GpuModel]}" m ON m."id" = s."gpu_model_id" '
        f'LEFT JOIN "{table[Pool]}" p ON p."id" = s."pool_id" '
        'ORDER BY s."period", t."name", u."username", s."job_id", m."name", s."card"'
    )
    with connection.cursor() as cursor:
        fast_timestamps(cursor)
        cursor.execute(query, params)
        return cursor.fetchall()


_GS_PLACES = Decimal(1).scaleb(-UsageRecord._meta.get_field("gpu_seconds").decimal_places)


def _line(row: tuple) -> UsageLine:
    (period, card, job_id, kind, team, department, user, job_name, gpus, fraction, model, pool, gs, utilized,
     measured) = row
    return UsageLine(
        period=_aware(period),
        team=team,
        department=department or team,
        user=user,
        job_id=job_id,
        job_name=job_name,
        kind=kind,
        gpu_model=model,
        pool=pool,
        gpus=_fraction(fraction) if fraction is not None else Decimal(gpus),
        card_version=card,
        gpu_seconds=Decimal(str(gs)).quantize(_GS_PLACES),
        utilized_gpu_seconds=utilized or 0.0,
        measured_gpu_seconds=measured or 0.0,
    )


def _aware(value) -> datetime:
    """A period as the ORM would give it: an aware datetime (SQLite hands back text or naive values, which
    are in the current time zone, as the ORM's truncation works)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if timezone.is_naive(value):
        value = timezone.make_aware(value, timezone.get_current_timezone())
    return value


def _fraction(value) -> Decimal:
    """A job's GPU fraction as the ORM gives it (0.250, whatever type the database handed back)."""
    places = Job._meta.get_field("gpu_fraction").decimal_places
    return Decimal(str(value)).quantize(Decimal(1).scaleb(-places))


def admin_teams_for(user) -> QuerySet[Team]:
    """Teams whose per-person detail ``user`` may see: all for platform admins, else those they are team-admin of."""
    if sees_all_costs(user):
        return Team.objects.all()
    if not user.is_authenticated:
        return Team.objects.none()
    return Team.objects.filter(memberships__user=user, memberships__role=Membership.TEAM_ADMIN)


def statements_for(user, *, limit: int = 24) -> list:
    """Stored monthly statements (they name people) of the teams ``user`` is team-admin of, newest first,
    without their content."""
    from accounting.models import Statement

    return list(
        Statement.objects.filter(team__in=admin_teams_for(user))
        .select_related("team")
        .defer("content")
        .order_by("-month", "team__name", "format")[:limit]
    )


def statement_for(user, statement_id: int):
    """A stored statement if ``user`` is team-admin of its team (or platform admin), else Http404 (the same
    answer as for a missing one)."""
    from accounting.models import Statement

    statement = Statement.objects.filter(pk=statement_id, team__in=admin_teams_for(user)).select_related("team").first()
    if statement is None:
        raise Http404("No such statement")
    return statement


def rollup_time():
    """When the ledger was last rolled up (None before the first rollup)."""
    from accounting.models import RollupState

    return RollupState.objects.filter(key="usage").values_list("rolled_until", flat=True).first()


@dataclass(frozen=True)
class TeamWaste:
    """Per team in a range: GPU-seconds of work lost to preemption and seconds jobs spent queued."""

    team: str
    preemptions: int = 0
    gpu_seconds_lost: float = 0.0
    queued_seconds: float = 0.0

    @property
    def gpu_hours_lost(self) -> float:
        return self.gpu_seconds_lost / 3600

    @property
    def queued_hours(self) -> float:
        return self.queued_seconds / 3600


def waste_by_team(
    user, *, start: datetime, end: datetime, now: datetime, waiting: list[tuple] | None = None
) -> list[TeamWaste]:
    """Preemption losses (from Preemption rows) and queued time (pending/held intervals from the recorded
    transitions, clipped to ``[start, min(end, now))``) per visible team. Two queries (one when the
    ``waiting`` intervals of ``accounting.selectors_fairness.waiting_intervals`` are passed in)."""
    from accounting.selectors_fairness import visible_team_names, waiting_intervals

    teams = cost_teams_for(user)
    lost = {
        r["job__team__name"]: r
        for r in Preemption.objects.filter(job__team__in=teams, at__gte=start, at__lt=end)
        .values("job__team__name")
        .annotate(n=Count("id"), s=Sum("gpu_seconds_lost"))
    }
    horizon = min(end, now)
    if waiting is None:
        waiting = waiting_intervals(visible_team_names(user), start=start, horizon=horizon)
    queued: dict[str, float] = {}
    for team, at, until in waiting:
        lo, hi = max(at, start), min(until, horizon)
        if hi > lo:
            queued[team] = queued.get(team, 0.0) + (hi - lo).total_seconds()
    names = sorted(set(lost) | set(queued))
    return [
        TeamWaste(
            team=n,
            preemptions=lost.get(n, {}).get("n", 0),
            gpu_seconds_lost=lost.get(n, {}).get("s") or 0.0,
            queued_seconds=queued.get(n, 0.0),
        )
        for n in names
    ]


def budgets_for(user) -> list[Budget]:
    """Budgets of the teams ``user`` may see."""
    return list(Budget.objects.filter(team__in=cost_teams_for(user)).select_related("team"))
