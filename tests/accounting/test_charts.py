"""Charts and periods are pure: rated lines in, Plotly figures out; ranges from presets and months."""

import math
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accounting import charts, periods
from accounting.rating import RateCardVersion, UsageLine, rate_lines

CARD = RateCardVersion(1, datetime(2026, 1, 1, tzinfo=UTC), {"h100-80gb": Decimal(4), "a100-40gb": Decimal(2)})


def line(day, team, job_id, model, hours, kind="training"):
    return UsageLine(
        period=datetime(2026, 11, day, tzinfo=UTC),
        team=team,
        department="research",
        user="u",
        job_id=job_id,
        job_name=f"j{job_id}",
        kind=kind,
        gpu_model=model,
        pool="train",
        gpus=Decimal(1),
        card_version=1,
        gpu_seconds=Decimal(hours * 3600),
    )


LINES = rate_lines(
    [
        line(1, "vision", 1, "h100-80gb", 2),
        line(2, "vision", 1, "h100-80gb", 1),
        line(2, "nlp", 2, "a100-40gb", 5, "notebook"),
    ],
    [CARD],
)


def test_usage_over_time_stacks_one_series_per_group_over_every_period():
    fig = charts.usage_over_time(LINES, "team")
    assert fig.layout.barmode == "stack"
    series = {t.name: list(t.y) for t in fig.data}
    assert series == {"nlp": [0.0, 5.0], "vision": [2.0, 1.0]}


def test_cost_by_model_and_top_jobs_rank_by_cost():
    fig = charts.cost_by(LINES, "gpu_model")
    assert list(fig.data[0].x) == ["h100-80gb", "a100-40gb"] and list(fig.data[0].y) == [12.0, 10.0]
    assert [(j, cost) for j, _, _, _, cost in charts.top_jobs(LINES)] == [(1, Decimal(12)), (2, Decimal(10))]


def test_an_unknown_group_by_is_refused():
    with pytest.raises(ValueError):
        charts.key_of("planet")


def test_month_parsing_and_presets():
    nov = periods.parse_month("2026-11")
    assert (nov.start, nov.end) == (datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC))
    dec = periods.parse_month("2026-12")
    assert dec.end == datetime(2027, 1, 1, tzinfo=UTC)
    last = periods.preset_range("last-month", date(2026, 1, 15))
    assert (last.start.date(), last.end.date()) == (date(2025, 12, 1), date(2026, 1, 1))
    week = periods.preset_range("7d", date(2026, 11, 29))
    assert (week.start.date(), week.end.date()) == (date(2026, 11, 23), date(2026, 11, 30))
    with pytest.raises(ValueError, match="YYYY-MM"):
        periods.parse_month("2026-00")
    # The range ends before the first of the next month, and says so in whole days.
    assert (nov.last_day, week.last_day) == (date(2026, 11, 30), date(2026, 11, 29))
    # Plain ASCII YYYY-MM and YYYY-MM-DD only: not other scripts' digits, nor ISO's other forms of a day.
    for month in ("\uff12026-11", "2026-\u0661\u0661"):
        with pytest.raises(ValueError, match="YYYY-MM"):
            periods.parse_month(month)
    for day in ("20261101", "2026-W48-3", "\uff12026-11-01"):
        with pytest.raises(ValueError, match="YYYY-MM-DD"):
            periods.parse_day(day)
    assert periods.parse_day("2026-11-01") == date(2026, 11, 1)


def test_months_and_days_stay_where_period_arithmetic_cannot_overflow():
    last = periods.parse_month("9998-12")
    assert last.end == datetime(9999, 1, 1, tzinfo=UTC)
    assert periods.spans(last.start, last.end, "week")[-1][0] == datetime(9998, 12, 28, tzinfo=UTC)
    assert periods.preset_range("custom", date(2026, 1, 1), "1970-01-01", "1970-01-31").start.year == 1970
    for month in ("9999-12", "1969-12", "0000-01"):
        with pytest.raises(ValueError, match="from 1970-01 to 9998-12"):
            periods.parse_month(month)
    for day in ("9999-12-31", "1969-12-31", "0001-01-01"):
        with pytest.raises(ValueError, match="from 1970-01-01 to 9998-12-31"):
            periods.parse_day(day)


T = datetime(2026, 11, 3, tzinfo=UTC)


def test_queue_depth_is_the_hourly_average_of_jobs_waiting():
    from datetime import timedelta

    hour = timedelta(hours=1)
    slots, depth = charts.queue_depth(
        [("a", T, T + 2 * hour), ("a", T + hour / 2, T + hour), ("b", T - 5 * hour, T + 90 * timedelta(minutes=1))],
        T,
        T + 3 * hour,
    )
    assert slots == [T, T + hour, T + 2 * hour]
    assert depth == {"a": [1.5, 1.0, 0.0], "b": [1.0, 0.5, 0.0]}


def test_wait_stats_give_median_p90_and_max_in_minutes():
    assert charts.wait_stats({"a": [60, 120, 180, 240, 300], "b": []}) == [("a", 5, 3.0, 4.6, 5.0)]


def test_failure_rate_is_failed_over_finished():
    assert charts.failure_rates({"a": (1, 4), "b": (0, 0)}) == [("a", 1, 4, 0.25)]
    fig = charts.failure_rate_chart(charts.failure_rates({"a": (1, 4)}))
    assert list(fig.data[0].y) == [25.0] and fig.data[0].text == ("1/4",)


def test_the_new_figures_build_from_plain_data():
    from accounting.fairness import QuotaTerm, fairness_statement
    from accounting.idle import idle_lines

    rated = rate_lines([line(3, "vision", 1, "h100-80gb", 2)], [CARD])
    eff = charts.efficiency_over_time(rated)
    assert [t.name for t in eff.data] == ["allocated GPU-hours (with telemetry)", "utilized GPU-hours", "efficiency %"]
    end = T + (T - T.replace(day=2))
    idle = idle_lines(periods=periods.spans(T, end, "day"), capacity=[(T, end, {"h100-80gb": 1})], allocated={},
                      cards=[CARD])  # fmt: skip
    assert list(charts.idle_over_time(idle).data[0].y) == [24.0]
    box = charts.wait_time_chart({"a": [60.0, 600.0]})
    assert box.data[0].type == "box" and list(box.data[0].y) == [1.0, 10.0]
    slots, depth = charts.queue_depth([("a", T, T.replace(hour=2))], T, T.replace(hour=3))
    assert list(charts.queue_depth_chart(slots, depth).data[0].y) == [1.0, 1.0, 0.0]
    fair = fairness_statement(start=T, end=T.replace(hour=1), teams=["a"], capacity=[(T, T.replace(hour=1), {"m": 1})],
                              quotas=[QuotaTerm("a", "m", 1, 1)], received_gpu_s={}, waiting={}, held={})  # fmt: skip
    assert [list(t.y) for t in charts.fairness_chart(fair).data] == [[1.0], [0.0]]


def test_chart_axes_read_as_plain_numbers_and_whole_percent_quarters():
    from datetime import UTC, datetime

    from accounting.charts import efficiency_over_time, queue_depth_chart, wait_time_chart

    wait = wait_time_chart({"vision": [0.02, 0.03]}).layout.yaxis
    assert wait.exponentformat == "none" and wait.rangemode == "tozero"
    depth = queue_depth_chart([datetime(2026, 12, 1, tzinfo=UTC)], {"vision": [0.03]}).layout.yaxis
    assert depth.exponentformat == "none"
    y2 = efficiency_over_time([]).layout.yaxis2
    assert (y2.tickmode, y2.dtick, y2.showgrid, tuple(y2.range)) == ("linear", 25, False, (0, 100))


def _depth_hour_by_hour(intervals, start, end):
    """The plain definition: for each hour, the waiting time of each team's jobs inside it, in hours."""
    from datetime import timedelta

    hours = max(0, math.ceil((end - start).total_seconds() / 3600))
    out = {}
    for team, lo, hi in intervals:
        lo, hi = max(lo, start), min(hi, end)
        if hi <= lo:
            continue
        row = out.setdefault(team, [0.0] * hours)
        for k in range(hours):
            a, b = max(lo, start + timedelta(hours=k)), min(hi, start + timedelta(hours=k + 1))
            row[k] += max((b - a).total_seconds(), 0.0) / 3600
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("ab"), st.integers(-7200, 40000), st.integers(0, 40000)), max_size=12),
       st.integers(1, 12))
def test_queue_depth_matches_its_hour_by_hour_definition(spans, hours):
    from datetime import timedelta

    intervals = [(team, T + timedelta(seconds=lo), T + timedelta(seconds=lo + length)) for team, lo, length in spans]
    _slots, depth = charts.queue_depth(intervals, T, T + timedelta(hours=hours))
    expected = _depth_hour_by_hour(intervals, T, T + timedelta(hours=hours))
    assert depth.keys() == expected.keys()
    for team, row in expected.items():
        assert depth[team] == pytest.approx(row, abs=1e-9)
