"""Charts and periods are pure: rated lines in, Plotly figures out; ranges from presets and months."""

from datetime import UTC, date, datetime
from decimal import Decimal

import pytest

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
