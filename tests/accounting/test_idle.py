"""Idle cost is pure: capacity minus allocation, priced at the card in force, and the OpenCost policies."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accounting.idle import check_policy, idle_lines, idle_report, share_pro_rata
from accounting.periods import spans
from accounting.rating import RateCardVersion

DAY = datetime(2026, 11, 3, tzinfo=UTC)
V1 = RateCardVersion(1, datetime(2026, 1, 1, tzinfo=UTC), {"h100": Decimal("4.00"), "a100": Decimal("2.00")})


def one_day(allocated, capacity=None, cards=(V1,)):
    """Idle lines of one day over which ``capacity`` GPUs per model (default 2 h100) were all present."""
    return idle_lines(
        periods=spans(DAY, DAY + timedelta(days=1), "day"),
        capacity=[(DAY, DAY + timedelta(days=1), capacity or {"h100": 2})],
        allocated=allocated,
        cards=list(cards),
    )


def test_idle_is_capacity_minus_allocated_priced_at_the_rate_card():
    [line] = one_day({(DAY, "h100", 1): Decimal(10 * 3600)})
    assert line.capacity_gpu_seconds == 48 * 3600
    assert line.idle_gpu_hours == 38
    assert line.rate == Decimal("4.00") and line.cost == Decimal("152.00")


def test_idle_never_goes_below_zero():
    [line] = one_day({(DAY, "h100", 1): Decimal(60 * 3600)})
    assert line.idle_gpu_seconds == 0 and line.cost == 0


def test_a_new_card_prices_idle_from_the_first_whole_hour_it_is_in_force():
    v2 = RateCardVersion(2, DAY + timedelta(hours=11, minutes=30), {"h100": Decimal("6.00")})
    lines = one_day({}, capacity={"h100": 1}, cards=(V1, v2))
    assert [(ln.card_version, ln.idle_gpu_hours, ln.cost) for ln in lines] == [
        (1, 12, Decimal("48.00")),  # 00:00–12:00 at 4.00 (the 11:00 hour is still rated by v1, as in the ledger)
        (2, 12, Decimal("72.00")),
    ]


def test_before_any_card_idle_is_unpriced():
    [line] = one_day({}, cards=())
    assert line.card_version is None and line.cost == 0 and line.idle_gpu_hours == 48


def test_spans_follow_the_ledger_periods_and_clip_to_the_range():
    start, end = datetime(2026, 11, 4, 12, tzinfo=UTC), datetime(2026, 11, 18, tzinfo=UTC)
    weeks = spans(start, end, "week")
    assert [k.date().isoformat() for k, _, _ in weeks] == ["2026-11-02", "2026-11-09", "2026-11-16"]
    assert weeks[0][1] == start and weeks[-1][2] == end
    assert [k.month for k, _, _ in spans(DAY, datetime(2027, 1, 2, tzinfo=UTC), "month")] == [11, 12, 1]
    assert len(spans(DAY, DAY + timedelta(hours=5), "hour")) == 5


def test_sharing_splits_the_cents_exactly():
    parts = share_pro_rata(Decimal("1.00"), {"a": Decimal(1), "b": Decimal(1), "c": Decimal(1)})
    assert parts == {"a": Decimal("0.34"), "b": Decimal("0.33"), "c": Decimal("0.33")}
    assert share_pro_rata(Decimal("10.00"), {"a": Decimal(3), "b": Decimal(1)}) == {
        "a": Decimal("7.50"),
        "b": Decimal("2.50"),
    }
    assert share_pro_rata(Decimal("5.00"), {"a": Decimal(0)}) == {}


@given(
    total=st.decimals(min_value=0, max_value=100000, places=2),
    weights=st.dictionaries(
        st.sampled_from("abcdef"), st.decimals(min_value="0.01", max_value=1000, places=2), min_size=1
    ),
)
def test_shares_always_add_up_to_the_idle_cost(total, weights):
    parts = share_pro_rata(total, weights)
    assert sum(parts.values(), Decimal(0)) == (total if total > 0 else 0)
    assert all(p >= 0 for p in parts.values())


COSTS = {"vision": Decimal("82.50"), "nlp": Decimal("27.50")}


def test_separate_shows_one_idle_line_to_those_who_see_every_team():
    lines = one_day({(DAY, "h100", 1): Decimal(10 * 3600)})
    report = idle_report(policy="separate", lines=lines, team_costs=COSTS, visible_teams=None)
    assert report.shows_line and report.total == Decimal("152.00") and report.shares == {}
    assert report.by_model() == [("h100", 2, Decimal(38), Decimal(48), Decimal("152.00"))]


def test_a_member_gets_no_idle_line_under_separate():
    lines = one_day({})
    report = idle_report(policy="separate", lines=lines, team_costs=COSTS, visible_teams={"vision"})
    assert not report.shows_line and report.lines == [] and report.total == 0


def test_share_hands_idle_cost_to_teams_pro_rata_to_their_cost():
    lines = one_day({(DAY, "h100", 1): Decimal(10 * 3600)})
    report = idle_report(policy="share", lines=lines, team_costs=COSTS, visible_teams=None)
    assert report.shares == {"vision": Decimal("114.00"), "nlp": Decimal("38.00")}  # 152 × 3/4, × 1/4
    assert not report.shows_line
    member = idle_report(policy="share", lines=lines, team_costs=COSTS, visible_teams={"nlp"})
    assert member.shares == {"nlp": Decimal("38.00")} and member.total == 0


def test_share_with_nothing_allocated_keeps_a_separate_line():
    report = idle_report(policy="share", lines=one_day({}), team_costs={}, visible_teams=None)
    assert report.shares == {} and report.shows_line and report.separate == Decimal("192.00")


def test_hide_omits_idle_cost():
    report = idle_report(policy="hide", lines=one_day({}), team_costs=COSTS, visible_teams=None)
    assert report.lines == [] and report.total == 0 and not report.shows_line and report.shares == {}


def test_an_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="hide, separate, share"):
        check_policy("spread")
