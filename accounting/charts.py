"""Plotly figures for the accounting dashboard. Pure: rated usage lines in, ``plotly`` figures out (no Django).

Every figure aggregates the same rated lines, so the charts agree with each other and with the exports.
"""

from collections import defaultdict
from collections.abc import Callable, Iterable
from decimal import Decimal

import plotly.graph_objects as go

from accounting.rating import RatedLine, round_money

GROUP_BYS = ("team", "department", "user", "kind", "gpu_model", "pool")
LABELS = {
    "team": "Team",
    "department": "Department",
    "user": "User",
    "kind": "Kind",
    "gpu_model": "GPU model",
    "pool": "Pool",
}
_IN_TITLE = {**{k: v.lower() for k, v in LABELS.items()}, "gpu_model": "GPU model"}
_LAYOUT = {
    "margin": {"l": 50, "r": 10, "t": 60, "b": 40},
    "title_x": 0,
    "height": 320,
    "legend": {"orientation": "h"},
    "font": {"family": "system-ui, sans-serif", "size": 12},
}


def key_of(group_by: str) -> Callable[[RatedLine], str]:
    if group_by not in GROUP_BYS:
        raise ValueError(f"group_by must be one of {', '.join(GROUP_BYS)}")
    return lambda line: getattr(line.usage, group_by)


def totals_by(lines: Iterable[RatedLine], key: Callable[[RatedLine], str]) -> list[tuple[str, Decimal, Decimal]]:
    """(group, GPU-hours, cost) per group, most expensive first; cost is the sum of rated lines."""
    hours: dict[str, Decimal] = defaultdict(Decimal)
    costs: dict[str, Decimal] = defaultdict(Decimal)
    for line in lines:
        k = key(line)
        hours[k] += line.usage.gpu_hours
        costs[k] += line.cost
    return sorted(((k, hours[k], costs[k]) for k in hours), key=lambda t: (-t[2], -t[1], t[0]))


def period_label(at) -> str:
    """``2026-11-04`` for a day, week or month start; with the hour for hourly periods."""
    return at.strftime("%Y-%m-%d %H:00" if (at.hour or at.minute) else "%Y-%m-%d")


def _over_time(lines: list[RatedLine], group_by: str, value: Callable[[RatedLine], Decimal], title: str, unit: str):
    key = key_of(group_by)
    periods = sorted({line.usage.period for line in lines})
    series: dict[str, dict] = defaultdict(lambda: defaultdict(Decimal))
    for line in lines:
        series[key(line)][line.usage.period] += value(line)
    labels = [period_label(p) for p in periods]
    fig = go.Figure()
    for name in sorted(series):
        fig.add_trace(go.Bar(name=name, x=labels, y=[float(series[name].get(p, 0)) for p in periods]))
    fig.update_layout(title=title, barmode="stack", yaxis_title=unit, xaxis_type="category", **_LAYOUT)
    return fig


def usage_over_time(lines: list[RatedLine], group_by: str = "team") -> go.Figure:
    """Stacked GPU-hours per period, one series per group."""
    return _over_time(lines, group_by, lambda r: r.usage.gpu_hours, f"GPU-hours by {_IN_TITLE[group_by]}", "GPU-hours")


def cost_over_time(lines: list[RatedLine], group_by: str = "team", currency: str = "USD") -> go.Figure:
    """Stacked cost per period, one series per group."""
    return _over_time(lines, group_by, lambda r: r.cost, f"Cost by {_IN_TITLE[group_by]}", currency)


def cost_by(lines: list[RatedLine], group_by: str, currency: str = "USD") -> go.Figure:
    """Cost per group as a bar chart (e.g. by GPU model or workload kind)."""
    rows = totals_by(lines, key_of(group_by))
    fig = go.Figure(
        go.Bar(
            x=[r[0] for r in rows],
            y=[float(r[2]) for r in rows],
            text=[f"{round_money(r[2])}" for r in rows],
            textposition="auto",
        )
    )
    fig.update_layout(title=f"Cost by {_IN_TITLE[group_by]}", yaxis_title=currency, **_LAYOUT)
    return fig


def top_jobs(lines: list[RatedLine], n: int = 10) -> list[tuple[int, str, str, Decimal, Decimal]]:
    """The ``n`` most expensive jobs: (job id, name, team, GPU-hours, cost)."""
    hours: dict[int, Decimal] = defaultdict(Decimal)
    costs: dict[int, Decimal] = defaultdict(Decimal)
    info: dict[int, tuple[str, str]] = {}
    for line in lines:
        hours[line.usage.job_id] += line.usage.gpu_hours
        costs[line.usage.job_id] += line.cost
        info[line.usage.job_id] = (line.usage.job_name, line.usage.team)
    ranked = sorted(costs, key=lambda j: (-costs[j], -hours[j], j))[:n]
    return [(j, info[j][0], info[j][1], hours[j], costs[j]) for j in ranked]


def top_jobs_chart(rows: list[tuple[int, str, str, Decimal, Decimal]], currency: str = "USD") -> go.Figure:
    """Horizontal bars of the most expensive jobs (the most expensive on top)."""
    rows = list(reversed(rows))
    fig = go.Figure(go.Bar(orientation="h", x=[float(r[4]) for r in rows], y=[f"#{r[0]} {r[1]}" for r in rows]))
    fig.update_layout(title="Top jobs by cost", xaxis_title=currency, yaxis_automargin=True, **_LAYOUT)
    return fig


def waste_chart(rows: list[tuple[str, float, float]]) -> go.Figure:
    """Per team: GPU-hours of work lost to preemption and hours jobs spent queued, side by side."""
    teams = [r[0] for r in rows]
    fig = go.Figure(
        [
            go.Bar(name="GPU-hours lost to preemption", x=teams, y=[r[1] for r in rows]),
            go.Bar(name="hours queued", x=teams, y=[r[2] for r in rows]),
        ]
    )
    fig.update_layout(barmode="group", yaxis_title="hours", **{**_LAYOUT, "margin": {**_LAYOUT["margin"], "t": 30}})
    return fig
