"""The usage ledger: slices per hour, prorated at boundaries, shares, re-runs and reconciliation."""

from datetime import timedelta
from decimal import Decimal

import pytest

from accounting.models import UsageRecord
from accounting.services import usage_reconcile, usage_rollup
from tests.accounting.helpers import T0, allocate, make_job, preempt

pytestmark = pytest.mark.django_db
H = timedelta(hours=1)
M = timedelta(minutes=1)


def rows(job):
    return list(UsageRecord.objects.filter(job=job).order_by("period_start").values_list("period_start", "gpu_seconds"))


def test_it_prorates_an_allocation_across_hour_boundaries(alice, cluster):
    job = make_job(alice, cluster["vision"])
    allocate(job, "GPU-h100-0", T0 + 30 * M, T0 + 2 * H + 15 * M)
    usage_rollup(until=T0 + 5 * H)
    assert rows(job) == [(T0, Decimal(1800)), (T0 + H, Decimal(3600)), (T0 + 2 * H, Decimal(900))]


def test_it_counts_a_fraction_by_the_share_held(alice, cluster):
    job = make_job(alice, cluster["vision"], gpu_fraction="0.25")
    allocate(job, "GPU-h100-1", T0 + 10 * M, T0 + 70 * M, share_milli=250)
    usage_rollup(until=T0 + 3 * H)
    assert rows(job) == [(T0, Decimal(750)), (T0 + H, Decimal(150))]
    rec = UsageRecord.objects.filter(job=job).first()
    assert (rec.team.name, rec.user.username, rec.kind, rec.gpu_model.name, rec.pool.name, rec.node.name) == (
        "vision",
        "alice",
        "training",
        "h100-80gb",
        "train",
        "node-h100",
    )


def test_it_counts_an_open_allocation_up_to_the_rollup_and_corrects_it_later(alice, cluster):
    job = make_job(alice, cluster["vision"])
    alloc = allocate(job, "GPU-h100-0", T0, None)
    usage_rollup(until=T0 + 90 * M)
    assert rows(job) == [(T0, Decimal(3600)), (T0 + H, Decimal(1800))]
    assert list(UsageRecord.objects.filter(job=job, open=True).values_list("period_start", flat=True)) == [T0 + H]
    alloc.ended_at = T0 + 70 * M
    alloc.save()
    usage_rollup(until=T0 + 3 * H)
    assert rows(job) == [(T0, Decimal(3600)), (T0 + H, Decimal(600))]
    assert not UsageRecord.objects.filter(job=job, open=True).exists()


def test_running_the_rollup_twice_changes_nothing(alice, cluster):
    job = make_job(alice, cluster["vision"], gpus=2)
    allocate(job, "GPU-h100-0", T0, T0 + 150 * M)
    allocate(job, "GPU-h100-1", T0, T0 + 150 * M)
    usage_rollup(until=T0 + 4 * H)
    first = sorted(UsageRecord.objects.values_list("allocation_id", "period_start", "gpu_seconds"))
    usage_rollup(until=T0 + 4 * H)
    usage_rollup(until=T0 + 4 * H, full=True)
    assert sorted(UsageRecord.objects.values_list("allocation_id", "period_start", "gpu_seconds")) == first
    assert len(first) == 6


def test_a_repair_run_rebuilds_an_allocation_whose_start_was_corrected_later(alice, cluster):
    job = make_job(alice, cluster["vision"])
    alloc = allocate(job, "GPU-h100-0", T0, T0 + 150 * M)
    usage_rollup(until=T0 + 4 * H)
    alloc.started_at = T0 + 90 * M  # a manual fix: it really started later
    alloc.save()
    report = usage_rollup(until=T0 + 4 * H, full=True)
    assert rows(job) == [(T0 + H, Decimal(1800)), (T0 + 2 * H, Decimal(1800))]
    assert report.deleted == 3


def test_an_allocation_that_ended_long_ago_is_not_recomputed_but_stays_billed(alice, cluster):
    job = make_job(alice, cluster["vision"])
    allocate(job, "GPU-h100-0", T0, T0 + H)
    usage_rollup(until=T0 + 3 * H)
    report = usage_rollup(until=T0 + 10 * H)
    assert report.allocations == 0
    assert rows(job) == [(T0, Decimal(3600))]


def test_ledger_reconciles_with_preemptions_fractions_and_boundaries(alice, charlie, cluster):
    vision, nlp = cluster["vision"], cluster["nlp"]
    victim = make_job(alice, vision, gpus=2, attempt=2, state="running")
    # attempt 1 preempted after 95 minutes (crossing an hour), requeued, attempt 2 still running
    for uuid in ("GPU-h100-0", "GPU-h100-1"):
        allocate(victim, uuid, T0 + 7 * M, T0 + 102 * M, attempt=1)
    preempt(victim, T0 + 102 * M, lost=1200.0)
    for uuid in ("GPU-a100-0", "GPU-a100-1"):
        allocate(victim, uuid, T0 + 3 * H + 13 * M, None, attempt=2)
    shared = make_job(charlie, nlp, gpu_fraction="0.333", kind="notebook")
    allocate(
        shared, "GPU-h100-2", T0 + 59 * M + timedelta(seconds=59, microseconds=7), T0 + 4 * H + 1 * M, share_milli=333
    )
    bigger = make_job(alice, vision, name="inf", kind="inference")
    allocate(bigger, "GPU-h100-0", T0 + 102 * M, T0 + 2 * H + 1 * M)

    usage_rollup(until=T0 + 3 * H + 30 * M)
    check = usage_reconcile()
    assert check.ok, check
    assert check.held_gpu_seconds > 0
    usage_rollup(until=T0 + 6 * H + 17 * M)
    assert usage_reconcile().ok
    # billed by the share held: 0.333 of a GPU for the notebook's interval
    notebook = sum(r for _, r in rows(shared))
    assert notebook == Decimal(((4 * 3600 + 60) - (59 * 60 + 59.000007)) * 0.333).quantize(Decimal("1e-9"))


def test_reconciliation_notices_a_missing_row(alice, cluster):
    job = make_job(alice, cluster["vision"])
    allocate(job, "GPU-h100-0", T0, T0 + 2 * H)
    usage_rollup(until=T0 + 3 * H)
    UsageRecord.objects.filter(job=job).first().delete()
    check = usage_reconcile()
    assert not check.ok and check.difference == Decimal(-3600)


def test_a_long_running_allocation_recomputes_only_recent_buckets(alice, cluster):
    job = make_job(alice, cluster["vision"])
    allocate(job, "GPU-h100-0", T0, None)
    usage_rollup(until=T0 + 48 * H + 30 * M)
    report = usage_rollup(until=T0 + 48 * H + 31 * M)
    assert report.rows == 2  # the hour before the slack and the current, partial hour
    assert UsageRecord.objects.filter(job=job).count() == 49
    assert usage_reconcile().ok


def test_a_rollup_into_the_past_drops_what_had_not_started(alice, cluster):
    job = make_job(alice, cluster["vision"])
    allocate(job, "GPU-h100-0", T0, None)
    usage_rollup(until=T0 + 3 * H)
    usage_rollup(until=T0 + 90 * M)
    assert rows(job) == [(T0, Decimal(3600)), (T0 + H, Decimal(1800))]
    assert usage_reconcile().ok
