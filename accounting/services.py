"""Writes for accounting's usage ledger: the usage rollup (single-flight, idempotent), its daily summary and
the reconciliation with allocations. Rate cards and monthly statements: ``accounting.services_billing``.

``usage_rollup`` recomputes the ledger rows of every allocation that may have changed since the last
rollup (open ones, and ones that ended since then), so running it twice, or late, or after a crash gives
the same ledger. Open allocations are counted up to the rollup time and corrected by the next run. It also
records the inventory's history (``capacity_record``): the capacity idle cost and fairness count.
"""

import logging
from collections import defaultdict
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.db import connection, transaction
from django.db.models import Min, Q, Sum
from django.utils import timezone

from accounting.capacity import InventoryGpu, OpenPresence, reconcile
from accounting.models import (
    GpuPresence,
    RateCard,
    RollupState,
    UsageDay,
    UsageRecord,
)
from accounting.selectors import _aware, day_floor, days_key, days_summed_until, hourly_sums_sql
from accounting.slicing import HOUR, bucket_floor, gpu_seconds, slice_interval, to_us
from portal import locks
from scheduler.models import Allocation, Gpu
from scheduler.services.common import db_now

log = logging.getLogger(__name__)

# Allocations that ended shortly before the last watermark are looked at again: a row committed late
# (stamped before the watermark, visible after it) is still picked up.
LATE_COMMIT_SLACK = timedelta(hours=1)


@dataclass
class RollupReport:
    ran: bool
    until: datetime | None = None
    allocations: int = 0
    rows: int = 0
    deleted: int = 0
    presence_changes: int = 0
    days: int = 0  # whole days newly summed into UsageDay

    def as_dict(self) -> dict:
        data = asdict(self)
        data["until"] = self.until.isoformat() if self.until else None
        return data


def _records_for(alloc: Allocation, until: datetime, from_bucket: datetime | None) -> list[UsageRecord]:
    """Ledger rows of ``alloc`` up to ``until``, from ``from_bucket`` on (earlier buckets are complete and
    unchanged since the last rollup)."""
    end = min(alloc.ended_at, until) if alloc.ended_at else until
    still_held = alloc.ended_at is None or alloc.ended_at > until
    start = max(alloc.started_at, from_bucket) if from_bucket else alloc.started_at
    job = alloc.job
    return [
        UsageRecord(
            allocation_id=alloc.pk,
            period_start=s.period_start,
            team_id=job.team_id,
            user_id=job.submitted_by_id,
            job_id=job.pk,
            attempt=alloc.attempt,
            kind=job.kind,
            gpu_model_id=alloc.gpu.model_id,
            pool_id=alloc.node.pool_id,
            node_id=alloc.node_id,
            share_milli=alloc.share_milli,
            held_us=s.held_us,
            gpu_seconds=gpu_seconds(s.held_us, alloc.share_milli),
            open=still_held and s.period_start + HOUR > until,
        )
        for s in slice_interval(start, end, HOUR)
    ]


def usage_rollup(*, until: datetime | None = None, full: bool = False) -> RollupReport:
    """Bring the ledger up to ``until`` (default: database now). Single-flight under the USAGE_ROLLUP
    advisory lock: returns ``ran=False`` at once if another rollup holds it. ``full`` recomputes every
    allocation (repair after a manual fix)."""
    with transaction.atomic():
        if not locks.try_xact_lock(locks.USAGE_ROLLUP):
            return RollupReport(ran=False)
        now = db_now()  # the inventory is as of now, whatever ``until`` is
        until = until or now
        state, _ = RollupState.objects.select_for_update().get_or_create(key="usage")
        allocs = Allocation.objects.select_related("job", "gpu", "node").filter(started_at__lt=until)
        from_bucket = None
        if not full and state.rolled_until is not None:
            since = min(state.rolled_until, until) - LATE_COMMIT_SLACK
            from_bucket = bucket_floor(since)
            allocs = allocs.filter(Q(ended_at__isnull=True) | Q(ended_at__gte=since) | Q(started_at__gte=since))
        allocs = list(allocs.order_by("pk"))
        records: list[UsageRecord] = []
        last_bucket: dict[int, datetime | None] = {}
        for alloc in allocs:
            rows = _records_for(alloc, until, from_bucket)
            records.extend(rows)
            end = min(alloc.ended_at, until) if alloc.ended_at else until
            last_bucket[alloc.pk] = bucket_floor(end - timedelta(microseconds=1)) if end > alloc.started_at else None
        # A repair rebuilds the ledger from the allocations: rows an edited allocation no longer covers go,
        # at either end. Otherwise only the tails past the recomputed allocations' (new) ends can be stale.
        deleted = UsageRecord.objects.all().delete()[0] if full else _delete_stale(last_bucket)
        if full or (state.rolled_until is not None and until < state.rolled_until):
            # A rollup into the past (or a repair): drop what had not started by ``until``.
            deleted += UsageRecord.objects.filter(
                Q(period_start__gte=bucket_floor(until) + HOUR) | Q(allocation__started_at__gte=until)
            ).delete()[0]
        if records:
            UsageRecord.objects.bulk_create(
                records,
                batch_size=2000,
                update_conflicts=True,
                unique_fields=["allocation", "period_start"],
                update_fields=["held_us", "gpu_seconds", "open", "share_milli", "team", "user", "kind"],
            )
        state.rolled_until = until
        state.save(update_fields=["rolled_until", "updated_at"])
        # Summed days are of rows no forward rollup rewrites; a repair, or a rollup into the past, rewrites them.
        if full:
            usage_days_forget(None)
        elif from_bucket is not None:
            usage_days_forget(from_bucket)  # (nothing to drop when the rollup went forward)
        days = usage_days_sum(final_before=bucket_floor(until - LATE_COMMIT_SLACK))
        changes = capacity_record(now=now)
    report = RollupReport(ran=True, until=until, allocations=len(allocs), rows=len(records), deleted=deleted,
                          presence_changes=changes, days=days)
    if allocs:
        log.info("usage rollup: %s", report.as_dict())
    return report


# Days summed by one rollup at most: the first rollup after an upgrade (or a rate card dated far back) catches
# up a few days a minute instead of summing years inside one task (about 0.12 s a day at 800 GPUs).
MAX_DAYS_PER_ROLLUP = 7


def _days_state() -> RollupState:
    """The ``UsageDay`` watermark of the portal's time zone, locked: rollups that sum days and changes that
    drop them take turns."""
    return RollupState.objects.select_for_update().get_or_create(key=days_key())[0]


def _cards_fingerprint() -> str:
    """The rate cards the summed days are rated under: ``version@effective_from`` of each, by time."""
    return ";".join(f"{v}@{at.astimezone(UTC).isoformat()}" for v, at in
                    RateCard.objects.order_by("effective_from").values_list("version", "effective_from"))


_FROM_THE_START = datetime.min.replace(tzinfo=UTC)


def _cards_changed_since(old: str, new: str) -> datetime | None:
    """The earliest ``effective_from`` among the cards that differ between two fingerprints (a card moved
    counts at both times; None: no card differs). One that cannot be read counts as changed from the start."""
    changed = (set(old.split(";")) ^ set(new.split(";"))) - {""}
    if not changed:
        return None
    try:
        return min(datetime.fromisoformat(entry.split("@", 1)[1]) for entry in changed)
    except (IndexError, ValueError):
        return _FROM_THE_START


def usage_days_sum(*, final_before: datetime) -> int:
    """Sum the whole days of hourly ledger rows that end by ``final_before`` (rows no later rollup changes) and
    are not summed yet into ``UsageDay`` (at most ``MAX_DAYS_PER_ROLLUP``), and move the watermark; returns
    the days summed. Runs inside the usage rollup, after its rows are written.

    The rate cards are compared with those the days were summed under: a change that no signal reported (a
    queryset update, fixtures, a migration) drops the days it touches too."""
    state = _days_state()
    cards = _cards_fingerprint()
    if state.rolled_until is not None and state.cards != cards:
        since = _cards_changed_since(state.cards, cards)
        if since is not None:
            _forget(None if since == _FROM_THE_START else since, state)
    if state.rolled_until is None:
        # Nothing summed for this time zone: days of another one (or of a repair) are not ours to keep.
        UsageDay.objects.all().delete()
        RollupState.objects.filter(key__startswith="usage-days@").exclude(pk=state.pk).delete()
    last = day_floor(final_before)
    first = state.rolled_until
    if first is None:
        oldest = UsageRecord.objects.order_by("period_start").values_list("period_start", flat=True).first()
        first = day_floor(oldest) if oldest is not None else last
    last = min(last, day_floor(first + timedelta(days=MAX_DAYS_PER_ROLLUP, hours=12)))
    if first < last:
        sums, params = hourly_sums_sql(UsageRecord.objects.all(), start=first, end=last, agg="day")
        # The sums' days are local and naive: stored as the instants they are in the portal's time zone.
        day, tz = ('s."period" AT TIME ZONE %s', (timezone.get_default_timezone_name(),)) if (
            connection.vendor == "postgresql") else ('s."period"', ())
        with connection.cursor() as cursor:
            cursor.execute(
                f'INSERT INTO "{UsageDay._meta.db_table}" ("day", "card", "job_id", "kind", "team_id", "user_id", '
                '"gpu_model_id", "pool_id", "gpu_seconds", "utilized_gpu_seconds", "measured_gpu_seconds") '
                f'SELECT {day}, s."card", s."job_id", s."kind", s."team_id", s."user_id", s."gpu_model_id", '
                f's."pool_id", s.gs, COALESCE(s.utilized, 0.0), COALESCE(s.measured, 0.0) FROM ({sums}) s',
                (*tz, *params),
            )
        state.rolled_until = last
    state.cards = cards
    state.save(update_fields=["rolled_until", "cards", "updated_at"])
    return max(0, round((last - first) / timedelta(days=1)))


def usage_days_check() -> list[str]:
    """Where the summed days disagree with the hourly rows they were summed from, over every summed day: per
    day, job, kind, team, user, GPU model, pool and rate card version, the GPU-seconds (exactly) and those
    with telemetry and weighted by utilization (to a millionth)."""
    until = days_summed_until()
    if until is None:
        return []
    keys = ("card", "job_id", "kind", "team_id", "user_id", "gpu_model_id", "pool_id")
    sums, params = hourly_sums_sql(UsageRecord.objects.all(), start=_FROM_THE_START, end=until, agg="day")
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM ({sums}) s", params)
        names = [c.name for c in cursor.description]
        hourly = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    daily = UsageDay.objects.filter(day__lt=until).values("day", *keys, "gpu_seconds", "utilized_gpu_seconds",
                                                          "measured_gpu_seconds")
    # Keyed by the day's instant in UTC: in zones that skip a midnight, two spellings of one instant differ.
    want = {(_aware(r["period"]).astimezone(UTC), *(r[k] for k in keys)):
            (r["gs"], r["utilized"] or 0.0, r["measured"] or 0.0) for r in hourly}
    have = {(_aware(r["day"]).astimezone(UTC), *(r[k] for k in keys)):
            (r["gpu_seconds"], r["utilized_gpu_seconds"], r["measured_gpu_seconds"]) for r in daily}
    findings = []
    for key in sorted(set(want) | set(have), key=lambda k: (k[0], k[2], k[6], k[7], k[1] or 0)):
        w, h = want.get(key, (0, 0.0, 0.0)), have.get(key, (0, 0.0, 0.0))
        if w[0] != h[0] or any(abs(a - b) > 1e-6 * max(1.0, abs(a)) for a, b in zip(w[1:], h[1:], strict=True)):
            findings.append(f"summed day {key[0]:%Y-%m-%d} of job {key[2]} (GPU model {key[6]}, pool {key[7]}, card "
                            f"{key[1]}) holds {h[0]} GPU-s ({h[1]:.3f} utilized, {h[2]:.3f} measured) but its hourly "
                            f"rows {w[0]} ({w[1]:.3f}, {w[2]:.3f})")
    return findings


def usage_days_forget(since: datetime | None) -> None:
    """Drop the summed days from ``since``'s day on (every day when None): their hourly rows or their rate
    cards changed. The next rollup sums them again."""
    with transaction.atomic():
        _forget(since)


def _forget(since: datetime | None, state: RollupState | None = None) -> None:
    state = state or _days_state()
    if since is None:
        UsageDay.objects.all().delete()
        state.rolled_until = None
    else:
        since = day_floor(since)
        if state.rolled_until is None or state.rolled_until <= since:
            return
        UsageDay.objects.filter(day__gte=since).delete()
        state.rolled_until = since
    state.save(update_fields=["rolled_until", "updated_at"])


def capacity_record(*, now: datetime) -> int:
    """Record the inventory's history up to ``now`` (``GpuPresence``, rules in ``accounting.capacity.reconcile``):
    close the stretches of GPUs that are gone or changed model, open one for each present GPU without one.
    Runs inside the usage rollup (under its lock); returns the rows closed plus opened. Two queries when
    nothing changed."""
    open_rows = [
        OpenPresence(r["id"], r["gpu_id"], r["gpu_model_id"], r["since"])
        for r in GpuPresence.objects.filter(until__isnull=True).values("id", "gpu_id", "gpu_model_id", "since")
    ]
    inventory = [
        InventoryGpu(r["id"], r["model_id"], r["present"], r["node__registered_at"])
        for r in Gpu.objects.values("id", "model_id", "present", "node__registered_at")
    ]
    plan = reconcile(open_rows, inventory, now=now)
    recorded = set(GpuPresence.objects.filter(gpu_id__in=list(plan.open)).values_list("gpu_id", flat=True))
    fresh = [g for g in plan.open if g not in recorded]  # (no query while nothing is to be opened)
    if fresh:
        # GPUs never recorded were there before the history began: from their first allocation when that is
        # earlier than their node's latest registration, so the ledger never holds more than the capacity.
        first = Allocation.objects.filter(gpu_id__in=fresh).values("gpu_id").annotate(at=Min("started_at"))
        plan = reconcile(open_rows, inventory, now=now, first_seen={r["gpu_id"]: r["at"] for r in first})
    for row_id, at in plan.close.items():
        GpuPresence.objects.filter(pk=row_id, until__isnull=True).update(until=at)
    GpuPresence.objects.bulk_create(
        [GpuPresence(gpu_id=g, gpu_model_id=m, since=since) for g, (m, since) in sorted(plan.open.items())]
    )
    return len(plan.close) + len(plan.open)


def _delete_stale(last_bucket: dict[int, datetime | None]) -> int:
    """Delete rows of the recomputed allocations that lie past their (new) last bucket, grouped so the
    number of queries stays small (open allocations all share the last bucket)."""
    by_last: dict[datetime | None, list[int]] = defaultdict(list)
    for alloc_id, last in last_bucket.items():
        by_last[last].append(alloc_id)
    deleted = 0
    for last, ids in by_last.items():
        qs = UsageRecord.objects.filter(allocation_id__in=ids)
        if last is not None:
            qs = qs.filter(period_start__gt=last)
        deleted += qs.delete()[0]
    return deleted


@dataclass(frozen=True)
class Reconciliation:
    """Ledger GPU-seconds against allocation intervals × share, both up to ``until``."""

    until: datetime
    ledger_gpu_seconds: Decimal
    held_gpu_seconds: Decimal

    @property
    def difference(self) -> Decimal:
        return self.ledger_gpu_seconds - self.held_gpu_seconds

    @property
    def ok(self) -> bool:
        return self.difference == 0


def usage_reconcile(*, until: datetime | None = None) -> Reconciliation:
    """Check that GPU-seconds billed equal GPU-seconds held: the ledger total against the allocation
    intervals (each clipped at ``until``, default: the last rollup time) times their share."""
    if until is None:
        until = RollupState.objects.filter(key="usage").values_list("rolled_until", flat=True).first() or db_now()
    held = Decimal(0)
    for started_at, ended_at, share_milli in (
        Allocation.objects.filter(started_at__lt=until).values_list("started_at", "ended_at", "share_milli").iterator()
    ):
        end = min(ended_at, until) if ended_at else until
        if end > started_at:
            held += gpu_seconds(to_us(end - started_at), share_milli)
    ledger = UsageRecord.objects.filter(period_start__lt=until).aggregate(s=Sum("gpu_seconds"))["s"] or Decimal(0)
    return Reconciliation(until=until, ledger_gpu_seconds=ledger, held_gpu_seconds=held)
