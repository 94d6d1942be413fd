"""Summed ledger days (``UsageDay``): what the accounting pages read for whole days. They must give the very lines
the hourly rows give, be summed only once no rollup changes their rows, and be dropped when their rows or rate
cards change."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db.models import F

from accounting.models import RateCard, RollupState, UsageDay, UsageRecord
from accounting.selectors import days_summed_until, team_usage_lines, usage_lines
from accounting.selectors_fairness import cluster_allocated
from accounting.services import LATE_COMMIT_SLACK, usage_days_forget, usage_rollup
from accounting.services_billing import rate_card_create
from scheduler.audit import audit
from scheduler.models import Gpu, GpuSampleRollup
from tests.accounting.conftest import NOV
from tests.accounting.helpers import allocate, make_job

pytestmark = pytest.mark.django_db
H = timedelta(hours=1)
D = timedelta(days=1)


def line_values(lines):
    """Lines as comparable tuples: GPU-seconds exactly, the float sums to a millionth of a GPU-second."""
    return [(ln.period, ln.team, ln.user, ln.job_id, ln.kind, ln.gpu_model, ln.pool, ln.card_version, ln.gpu_seconds,
             round(ln.utilized_gpu_seconds, 6), round(ln.measured_gpu_seconds, 6)) for ln in lines]


def roll(until, *, full=False):
    """Roll the ledger up to ``until`` and let the days catch up (a rollup sums at most a week of them)."""
    report = usage_rollup(until=until, full=full)
    days = report.days
    while report.days:
        report = usage_rollup(until=until)
        days += report.days
    return days


def values(rows):
    return line_values(rows) if rows and not isinstance(rows[0], tuple) else rows


@pytest.fixture
def midnight(usage, alice, charlie, cluster):
    """On top of the month of ``usage``: work that crosses midnights, a fraction, telemetry for some hours."""
    long = make_job(alice, cluster["vision"], name="long", gpus=1)
    allocate(long, "GPU-h100-0", NOV + timedelta(days=7, hours=20, minutes=17), NOV + timedelta(days=9, hours=2))
    frac = make_job(charlie, cluster["nlp"], name="frac", gpu_fraction="0.5")
    allocate(frac, "GPU-a100-1", NOV + timedelta(days=12, hours=23, minutes=30),
             NOV + timedelta(days=13, hours=0, minutes=45), share_milli=500)
    gpu = Gpu.objects.get(uuid="GPU-h100-0")
    for k in range(0, 30, 3):  # telemetry for every third hour of the long job
        GpuSampleRollup.objects.create(gpu=gpu, job=long, hour=NOV + timedelta(days=7, hours=20 + k), samples=60,
                                       util_avg=40.0 + k)
    roll(until=NOV + timedelta(days=30), full=True)  # (work written into the past: a repair counts it)
    return {"long": long, "frac": frac}


RANGES = [
    (NOV, NOV + timedelta(days=30)),  # whole days
    (NOV + timedelta(days=7, hours=21, minutes=5), NOV + timedelta(days=13, hours=0, minutes=20)),  # mid-day ends
    (NOV - timedelta(days=2), NOV + timedelta(days=8, hours=3)),
    (NOV + timedelta(days=8, hours=1), NOV + timedelta(days=8, hours=5)),  # inside one day
]


@pytest.mark.parametrize("agg", ["day", "week", "month", "hour"])
@pytest.mark.parametrize(("start", "end"), RANGES)
def test_lines_read_through_summed_days_equal_lines_from_the_hourly_rows(midnight, staff, alice, cluster, agg, start,
                                                                        end):
    assert days_summed_until() == NOV + timedelta(days=29)  # (the rollup ran to Dec 1; an hour of slack)
    assert UsageDay.objects.exists()
    read = [lambda: usage_lines(staff, start=start, end=end, agg=agg),
            lambda: usage_lines(alice, start=start, end=end, agg=agg),  # vision only; others' rows masked
            lambda: team_usage_lines(cluster["nlp"], start=start, end=end, agg=agg),
            lambda: sorted(cluster_allocated(start=start, end=end, agg=agg), key=str)]  # idle cost's input
    through_days = [values(fn()) for fn in read]
    usage_days_forget(None)
    assert days_summed_until() is None and not UsageDay.objects.exists()
    assert [values(fn()) for fn in read] == through_days
    assert through_days[0], "the range holds usage"


def test_the_summed_lines_carry_utilization_from_telemetry(midnight, staff):
    day = NOV + timedelta(days=8)
    (line,) = [ln for ln in usage_lines(staff, start=day, end=day + D, agg="day") if ln.job_id == midnight["long"].pk]
    assert line.gpu_seconds == Decimal(86400)
    hours = [k for k in range(0, 30, 3) if day <= NOV + timedelta(days=7, hours=20 + k) < day + D]
    assert line.measured_gpu_seconds == pytest.approx(3600 * len(hours))
    assert line.utilized_gpu_seconds == pytest.approx(sum(3600 * (40.0 + k) / 100 for k in hours))


def test_a_day_is_summed_only_once_no_later_rollup_changes_its_rows(alice, cluster):
    job = make_job(alice, cluster["vision"])
    alloc = allocate(job, "GPU-h100-0", NOV + timedelta(hours=22), None)  # still running
    usage_rollup(until=NOV + D + LATE_COMMIT_SLACK - timedelta(minutes=1))
    assert days_summed_until() is None  # Nov 1's rows may still change: the rollup looks an hour back
    usage_rollup(until=NOV + D + LATE_COMMIT_SLACK)
    assert days_summed_until() == NOV + D
    assert list(UsageDay.objects.values_list("day", "gpu_seconds")) == [(NOV, Decimal(7200))]
    alloc.ended_at = NOV + D + timedelta(hours=3)
    alloc.save()
    report = usage_rollup(until=NOV + 3 * D + 2 * H)
    assert report.days == 2 and days_summed_until() == NOV + 3 * D
    assert list(UsageDay.objects.order_by("day").values_list("day", "gpu_seconds")) == [
        (NOV, Decimal(7200)), (NOV + D, Decimal(3 * 3600))]
    assert usage_rollup(until=NOV + 3 * D + 3 * H).days == 0  # nothing summed twice
    assert audit(only=["ledger"]) == []


def test_a_backdated_rate_card_drops_the_days_it_rates_and_the_next_rollup_sums_them_again(midnight, staff):
    before = line_values(usage_lines(staff, start=NOV, end=NOV + timedelta(days=30), agg="month"))
    rate_card_create(version=2, effective_from=NOV + timedelta(days=8, hours=12),
                     prices={"h100-80gb": Decimal("5.00"), "a100-40gb": Decimal("3.00")})
    assert days_summed_until() == NOV + timedelta(days=8)  # the card's day and after are dropped
    assert not UsageDay.objects.filter(day__gte=NOV + timedelta(days=8)).exists()
    lines = usage_lines(staff, start=NOV, end=NOV + timedelta(days=30), agg="month")
    cards = {ln.card_version: ln.gpu_seconds for ln in lines if ln.job_id == midnight["long"].pk}
    # Nov 8 20:17 to Nov 10 02:00, split at Nov 9 12:00
    assert cards == {1: Decimal(15 * 3600 + 43 * 60), 2: Decimal(14 * 3600)}
    assert sum(ln.gpu_seconds for ln in lines) == sum(v[8] for v in before)  # the same seconds, rated anew
    roll(until=NOV + timedelta(days=30, hours=1))
    assert days_summed_until() == NOV + timedelta(days=30)
    assert line_values(usage_lines(staff, start=NOV, end=NOV + timedelta(days=30), agg="month")) == line_values(lines)
    card = RateCard.objects.get(version=2)
    card.effective_from = "2026-11-20T00:00:00Z"  # moved later, given as text (the days from the 9th stay dropped)
    card.save()
    assert days_summed_until() == NOV + timedelta(days=8)
    roll(until=NOV + timedelta(days=30, hours=2))
    card.effective_from = "2026-11-10T06:00:00+00:00"  # moved earlier: dropped from the 10th on
    card.save()
    assert days_summed_until() == NOV + timedelta(days=9)
    roll(until=NOV + timedelta(days=30, hours=3))
    card.delete()
    assert days_summed_until() == NOV + timedelta(days=9)
    assert line_values(usage_lines(staff, start=NOV, end=NOV + timedelta(days=30), agg="month")) == before


def test_a_repair_forgets_every_summed_day_and_a_rollup_into_the_past_those_it_rewrites(midnight):
    roll(until=NOV + timedelta(days=10), full=True)
    assert days_summed_until() == NOV + timedelta(days=9)
    assert not UsageDay.objects.filter(day__gte=NOV + timedelta(days=9)).exists()
    usage_rollup(until=NOV + timedelta(days=8, hours=6))  # into the past
    assert days_summed_until() == NOV + timedelta(days=8)
    assert audit(only=["ledger"]) == []


def test_the_auditor_finds_a_summed_day_that_disagrees_with_its_hourly_rows(midnight):
    row = UsageDay.objects.filter(job=midnight["long"], day=NOV + timedelta(days=8)).get()
    UsageDay.objects.filter(pk=row.pk).update(gpu_seconds=row.gpu_seconds + 1)
    (finding,) = audit(only=["ledger"])
    assert f"summed day 2026-11-09 of job {midnight['long'].pk}" in finding
    assert "holds 86401.000000000 GPU-s" in finding and "but its hourly rows 86400.000000000" in finding
    UsageDay.objects.filter(pk=row.pk).update(gpu_seconds=row.gpu_seconds,
                                              utilized_gpu_seconds=F("utilized_gpu_seconds") + 5)
    (finding,) = audit(only=["ledger"])  # efficiency too: what the days say of utilization must hold
    assert f"{row.utilized_gpu_seconds + 5:.3f} utilized" in finding
    UsageDay.objects.filter(pk=row.pk).update(utilized_gpu_seconds=row.utilized_gpu_seconds)
    assert audit(only=["ledger"]) == []
    UsageRecord.objects.filter(job=midnight["frac"]).delete()
    findings = audit(only=["ledger"])
    assert any(f"of job {midnight['frac'].pk}" in f and "its hourly rows 0" in f for f in findings)


def test_a_late_sample_for_a_summed_day_drops_it_and_the_next_rollup_reads_its_utilization(alice, cluster):
    from scheduler.services.telemetry import LATE_SAMPLE, telemetry_ingest

    assert LATE_SAMPLE <= LATE_COMMIT_SLACK  # no sample on time can fall in a summed day
    job = make_job(alice, cluster["vision"])
    allocate(job, "GPU-h100-0", NOV + timedelta(days=9, hours=18), None)
    roll(until=NOV + timedelta(days=10, hours=4))
    day = UsageDay.objects.get(job=job, day=NOV + timedelta(days=9))
    assert (day.gpu_seconds, day.measured_gpu_seconds) == (Decimal(6 * 3600), 0.0)
    node = cluster["nodes"][0]
    on_time = {"uuid": "GPU-h100-0", "at": NOV + timedelta(days=10, hours=4, minutes=30), "util_pct": 90.0}
    telemetry_ingest(node=node, rows=[on_time], now=NOV + timedelta(days=10, hours=5))
    assert days_summed_until() == NOV + timedelta(days=10)  # a sample on time drops nothing
    late = {"uuid": "GPU-h100-1", "at": NOV + timedelta(days=9, hours=20, minutes=30), "util_pct": 50.0}
    allocate(job, "GPU-h100-1", NOV + timedelta(days=9, hours=18), None)
    roll(until=NOV + timedelta(days=10, hours=5), full=True)
    # What a node cut off for a while sends: what it kept, up to now (its newest row sets the clock).
    now_row = {"uuid": "GPU-h100-1", "at": NOV + timedelta(days=10, hours=4, minutes=59), "util_pct": 10.0}
    assert telemetry_ingest(node=node, rows=[late, now_row], now=NOV + timedelta(days=10, hours=5)) == 2
    assert days_summed_until() == NOV + timedelta(days=9)
    roll(until=NOV + timedelta(days=10, hours=5))
    days = {d.measured_gpu_seconds: d.utilized_gpu_seconds
            for d in UsageDay.objects.filter(job=job, day=NOV + timedelta(days=9))}
    assert days == {3600.0: 1800.0}  # the hour the late sample covers, at its 50%
    assert audit(only=["ledger"]) == []


def test_days_are_the_portals_local_days_and_a_new_time_zone_sums_them_afresh(midnight, staff, settings):
    from django.utils import timezone as tz

    settings.TIME_ZONE = "Europe/Berlin"
    roll(NOV + timedelta(days=30, hours=1))
    berlin = tz.get_default_timezone()
    days = sorted(set(UsageDay.objects.values_list("day", flat=True)))
    assert days and all(d.astimezone(berlin).hour == 0 and d.astimezone(berlin).minute == 0 for d in days)
    assert NOV - timedelta(hours=1) in days  # Berlin's November 1st begins at 23:00 UTC
    assert audit(only=["ledger"]) == []
    start, end = NOV + timedelta(days=3), NOV + timedelta(days=20, hours=5)
    read = [lambda agg=agg: line_values(usage_lines(staff, start=start, end=end, agg=agg)) for agg in ("day", "week")]
    through_days = [fn() for fn in read]
    usage_days_forget(None)
    assert [fn() for fn in read] == through_days
    assert through_days[0][0][0].tzinfo is not None and through_days[0][0][0].astimezone(berlin).hour == 0
    settings.TIME_ZONE = "UTC"  # back: Berlin's days are not UTC's
    roll(NOV + timedelta(days=30, hours=2))
    assert all(d.hour == 0 for d in UsageDay.objects.values_list("day", flat=True))
    assert list(RollupState.objects.filter(key__startswith="usage-days").values_list("key", flat=True)) == [
        "usage-days@UTC"]
    assert audit(only=["ledger"]) == []


def test_a_rollup_sums_at_most_a_week_of_days_and_the_next_ones_catch_up(midnight):
    usage_days_forget(None)
    first = usage_rollup(until=NOV + timedelta(days=30, hours=1))
    assert first.days == 7 and days_summed_until() == NOV - D + 7 * D  # from October 31st, the oldest row
    assert roll(NOV + timedelta(days=30, hours=1)) == 31 - 7
    assert days_summed_until() == NOV + timedelta(days=30)
    assert audit(only=["ledger"]) == []


def test_a_rate_card_changed_behind_the_signals_back_is_noticed_by_the_next_rollup(midnight, staff):
    before = line_values(usage_lines(staff, start=NOV, end=NOV + timedelta(days=30), agg="month"))
    RateCard.objects.filter(version=1).update(effective_from=NOV + timedelta(days=12, hours=6))  # no signal
    roll(NOV + timedelta(days=30, hours=1))
    assert audit(only=["ledger"]) == []
    through_days = line_values(usage_lines(staff, start=NOV, end=NOV + timedelta(days=30), agg="month"))
    assert {v[7] for v in through_days} == {None, 1} and through_days != before  # unrated before Nov 13 06:00
    usage_days_forget(None)
    assert line_values(usage_lines(staff, start=NOV, end=NOV + timedelta(days=30), agg="month")) == through_days


@pytest.mark.django_db(transaction=True)
def test_a_reading_sees_the_days_and_their_watermark_as_of_one_moment(midnight, staff, monkeypatch):
    import threading

    from django.db import connection as main_connection

    from accounting import selectors

    total = sum(ln.gpu_seconds for ln in usage_lines(staff, start=NOV, end=NOV + timedelta(days=30), agg="day"))
    spans = selectors.ledger_spans

    def card_change_right_after_the_watermark_is_read(*args):
        found = spans(*args)

        def change():  # another connection: commits while the reading is between its two queries
            try:
                rate_card_create(version=2, effective_from=NOV + timedelta(days=4),
                                 prices={"h100-80gb": Decimal("5.00"), "a100-40gb": Decimal("3.00")})
            finally:
                from django.db import connection

                connection.close()

        worker = threading.Thread(target=change)
        worker.start()
        worker.join()
        return found

    monkeypatch.setattr(selectors, "ledger_spans", card_change_right_after_the_watermark_is_read)
    assert not main_connection.in_atomic_block
    lines = usage_lines(staff, start=NOV, end=NOV + timedelta(days=30), agg="day")
    assert RateCard.objects.filter(version=2).exists() and days_summed_until() == NOV + timedelta(days=4)
    assert sum(ln.gpu_seconds for ln in lines) == total  # no summed day lost to the change
    assert {ln.card_version for ln in lines} == {1}  # the reading is of the moment before it
