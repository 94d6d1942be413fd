"""Rating is a pure function: usage × the rate card version in force → cost, rounded half-up to cents."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.core.management import call_command

from accounting.models import RateCard
from accounting.rating import RateBook, RateCardVersion, UsageLine, budget_status, cost, rate_lines, round_money
from accounting.selectors import rate_cards, usage_lines
from accounting.services import usage_rollup
from accounting.services_billing import rate_card_create
from tests.accounting.helpers import T0, allocate, make_job

V1 = RateCardVersion(1, datetime(2026, 1, 1, tzinfo=UTC), {"h100-80gb": Decimal("4.00")})
V2 = RateCardVersion(2, datetime(2026, 11, 2, 10, tzinfo=UTC), {"h100-80gb": Decimal("5.00")})


def test_it_rounds_half_up_to_cents():
    assert round_money(Decimal("0.005")) == Decimal("0.01")
    assert round_money(Decimal("0.015")) == Decimal("0.02")  # banker's rounding would give 0.02 too
    assert round_money(Decimal("0.025")) == Decimal("0.03")  # ...but 0.02 here
    assert round_money(Decimal("2.344999")) == Decimal("2.34")


def test_it_prices_gpu_seconds_per_gpu_hour():
    assert cost(Decimal(3600), Decimal("4.00")) == Decimal("4.00")
    assert cost(Decimal(45), Decimal("1.00")) == Decimal("0.01")  # 0.0125 → 0.01
    assert cost(Decimal(63), Decimal("1.00")) == Decimal("0.02")  # 0.0175 → 0.02
    assert cost(Decimal(900), Decimal("0.02")) == Decimal("0.01")  # exactly 0.005 → 0.01


def test_the_card_in_force_is_the_latest_effective_one():
    book = RateBook([V2, V1])
    assert book.price("h100-80gb", datetime(2026, 11, 2, 9, 59, tzinfo=UTC)) == (Decimal("4.00"), 1)
    assert book.price("h100-80gb", datetime(2026, 11, 2, 10, tzinfo=UTC)) == (Decimal("5.00"), 2)
    assert book.price("h100-80gb", datetime(2025, 1, 1, tzinfo=UTC)) == (Decimal(0), None)


def line(version, seconds, model="h100-80gb"):
    return UsageLine(
        period=T0,
        team="vision",
        department="vision",
        user="alice",
        job_id=1,
        job_name="j",
        kind="training",
        gpu_model=model,
        pool="train",
        gpus=Decimal(1),
        card_version=version,
        gpu_seconds=Decimal(seconds),
    )


def test_rate_lines_uses_the_version_each_line_was_grouped_under_and_zero_when_unpriced():
    rated = rate_lines([line(1, 3600), line(2, 1800), line(2, 3600, "l4"), line(None, 3600)], [V1, V2])
    assert [(r.rate, r.cost) for r in rated] == [
        (Decimal("4.00"), Decimal("4.00")),
        (Decimal("5.00"), Decimal("2.50")),
        (0, 0),
        (0, 0),
    ]
    assert rated[0].team == "vision"


def test_a_jobs_lines_add_up_to_its_cost_rounded_once_whatever_the_periods():
    """3 s a day at $4/h is $0.0033 a day: rounded alone each day says 0.00, yet the two days cost $0.0067,
    0.01 on the monthly chargeback. By day, the first day says 0.00 and the second what the running total
    adds (0.01): the same 0.01 in both views."""
    day1, day2 = T0, T0 + timedelta(days=1)

    def at(period, seconds, job=1):
        return replace(line(1, seconds), period=period, job_id=job)

    card = RateCardVersion(1, datetime(2026, 1, 1, tzinfo=UTC), {"h100-80gb": Decimal("4.00")})
    by_day = rate_lines([at(day2, 3), at(day1, 3), at(day1, 9, job=2)], [card])  # in any order
    by_month = rate_lines([at(day1, 6), at(day1, 9, job=2)], [card])
    assert [r.cost for r in by_day] == [Decimal("0.01"), Decimal("0.00"), Decimal("0.01")]
    assert sum(r.cost for r in by_day) == sum(r.cost for r in by_month) == Decimal("0.02")
    ten = rate_lines([at(day1 + timedelta(days=d), 3) for d in range(10)], [card])
    assert sum(r.cost for r in ten) == round_money(Decimal(30) * 4 / 3600) == Decimal("0.03")
    assert all(abs(r.cost - Decimal(3) * 4 / 3600) < Decimal("0.01") for r in ten)  # each line near its own


def test_budget_status_warns_at_the_threshold_and_flags_overruns():
    assert budget_status("v", "money", Decimal(100), Decimal(79), 80).level == "ok"
    assert budget_status("v", "money", Decimal(100), Decimal(80), 80).level == "warn"
    assert budget_status("v", "money", Decimal(100), Decimal("100.01"), 80).level == "over"


@pytest.mark.django_db
def test_usage_lines_split_at_a_rate_card_change(alice, cluster):
    rate_card_create(version=1, effective_from=V1.effective_from, prices={"h100-80gb": Decimal("4.00")})
    rate_card_create(version=2, effective_from=V2.effective_from, prices={"h100-80gb": Decimal("5.00")})
    job = make_job(alice, cluster["vision"])
    allocate(job, "GPU-h100-0", T0, T0 + timedelta(hours=2))
    usage_rollup(until=T0 + timedelta(hours=3))
    lines = usage_lines(alice, start=T0, end=T0 + timedelta(days=1), agg="day")
    rated = rate_lines(lines, rate_cards())
    assert sorted((r.card_version, r.cost) for r in rated) == [(1, Decimal("4.00")), (2, Decimal("5.00"))]


@pytest.mark.django_db
def test_seed_rates_prices_every_gpu_model_and_is_idempotent(cluster):
    call_command("seed_rates")
    call_command("seed_rates")
    card = RateCard.objects.get()
    assert {e.gpu_model.name: e.price_per_gpu_hour for e in card.entries.all()} == {
        "h100-80gb": Decimal("4.0000"),
        "a100-40gb": Decimal("2.2000"),
    }
