"""Plotly figures for the accounting dashboard. Pure: rated usage lines in, ``plotly`` figures out (no Django).

Every figure aggregates the same rated lines, so the charts agree with each other and with the exports. Hover
labels (and bar labels) round as the dashboard's tables do (``accounting.numbers``): a small value never reads
as 0 in one place and 0.023 in another.
"""

import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from decimal import Decimal

import plotly.graph_objects as go

from accounting import numbers
from accounting.rating import RatedLine

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


def _hover(
    values: Iterable, fmt: Callable[[object], str] = numbers.quantity, axis: str = "x", named: bool = True
) -> dict:
    """Trace settings that show each value in the hover label as the tables show it: ``axis`` is the
    category axis (``y`` for horizontal bars); ``named`` traces add their name, as Plotly does by default."""
    extra = "%{fullData.name}" if named else ""
    return {
        "customdata": [fmt(v) for v in values],
        "hovertemplate": f"%{{{axis}}}: %{{customdata}}<extra>{extra}</extra>",
    }


def _money(value) -> str:
    return numbers.money(value)


def _hours(value) -> str:
    return numbers.quantity(value, 2)


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


def _over_time(
    lines: list[RatedLine],
    group_by: str,
    value: Callable[[RatedLine], Decimal],
    title: str,
    unit: str,
    fmt: Callable[[object], str],
):
    key = key_of(group_by)
    periods = sorted({line.usage.period for line in lines})
    series: dict[str, dict] = defaultdict(lambda: defaultdict(Decimal))
    for line in lines:
        series[key(line)][line.usage.period] += value(line)
    labels = [period_label(p) for p in periods]
    fig = go.Figure()
    for name in sorted(series):
        values = [series[name].get(p, Decimal(0)) for p in periods]
        fig.add_trace(go.Bar(name=name, x=labels, y=[float(v) for v in values], **_hover(values, fmt)))
    fig.update_layout(title=title, barmode="stack", yaxis_title=unit, xaxis_type="category", **_LAYOUT)
    return fig


def usage_over_time(lines: list[RatedLine], group_by: str = "team") -> go.Figure:
    """Stacked GPU-hours per period, one series per group."""
    title = f"GPU-hours by {_IN_TITLE[group_by]}"
    return _over_time(lines, group_by, lambda r: r.usage.gpu_hours, title, "GPU-hours", _hours)


def cost_over_time(lines: list[RatedLine], group_by: str = "team", currency: str = "USD") -> go.Figure:
    """Stacked cost per period, one series per group."""
    return _over_time(lines, group_by, lambda r: r.cost, f"Cost by {_IN_TITLE[group_by]}", currency, _money)


def cost_by(lines: list[RatedLine], group_by: str, currency: str = "USD") -> go.Figure:
    """Cost per group as a bar chart (e.g. by GPU model or workload kind)."""
    rows = totals_by(lines, key_of(group_by))
    fig = go.Figure(
        go.Bar(
            x=[r[0] for r in rows],
            y=[float(r[2]) for r in rows],
            text=[_money(r[2]) for r in rows],
            textposition="auto",
            **_hover([r[2] for r in rows], _money, named=False),
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
    fig = go.Figure(
        go.Bar(
            orientation="h",
            x=[float(r[4]) for r in rows],
            y=[f"#{r[0]} {r[1]}" for r in rows],
            **_hover([r[4] for r in rows], _money, axis="y", named=False),
        )
    )
    fig.update_layout(title="Top jobs by cost", xaxis_title=currency, yaxis_automargin=True, **_LAYOUT)
    return fig


def waste_chart(rows: list[tuple[str, float, float]]) -> go.Figure:
    """Per team: GPU-hours of work lost to preemption and hours jobs spent queued, side by side."""
    teams, lost, queued = [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]
    fig = go.Figure(
        [
            go.Bar(name="GPU-hours lost to preemption", x=teams, y=lost, **_hover(lost, _hours)),
            go.Bar(name="hours queued", x=teams, y=queued, **_hover(queued, _hours)),
        ]
    )
    fig.update_layout(barmode="group", yaxis_title="hours", **{**_LAYOUT, "margin": {**_LAYOUT["margin"], "t": 30}})
    return fig


def _compact(title: str | None = None) -> dict:
    return {**_LAYOUT, "title": title} if title else {**_LAYOUT, "margin": {**_LAYOUT["margin"], "t": 30}}


def efficiency_over_time(lines: list[RatedLine]) -> go.Figure:
    """Allocated vs utilized GPU-hours per period (bars) and efficiency (line, right axis), over the hours
    with telemetry: allocated-but-unused GPU time is the gap between the bars."""
    periods = sorted({line.usage.period for line in lines})
    measured: dict = defaultdict(float)
    utilized: dict = defaultdict(float)
    for line in lines:
        measured[line.usage.period] += line.usage.measured_gpu_seconds / 3600
        utilized[line.usage.period] += line.usage.utilized_gpu_seconds / 3600
    labels = [period_label(p) for p in periods]
    eff = [utilized[p] / measured[p] * 100 if measured[p] else None for p in periods]
    allocated, used = [measured[p] for p in periods], [utilized[p] for p in periods]
    fig = go.Figure(
        [
            go.Bar(name="allocated GPU-hours (with telemetry)", x=labels, y=allocated, **_hover(allocated, _hours)),
            go.Bar(name="utilized GPU-hours", x=labels, y=used, **_hover(used, _hours)),
            go.Scatter(
                name="efficiency %",
                x=labels,
                y=eff,
                yaxis="y2",
                mode="lines+markers",
                **_hover([None if e is None else e / 100 for e in eff], numbers.percent),
            ),
        ]
    )
    fig.update_layout(
        barmode="group",
        xaxis_type="category",
        yaxis_title="GPU-hours",
        # Whole quarters on the right axis, without gridlines of its own (they would not meet the left's).
        yaxis2={"title": "%", "overlaying": "y", "side": "right", "range": [0, 100], "tickmode": "linear",
                "tick0": 0, "dtick": 25, "showgrid": False},
        **_compact("Allocated vs utilized (efficiency)"),
    )
    return fig


def idle_over_time(rows: Iterable, currency: str = "USD") -> go.Figure:
    """Idle GPU-hours (capacity nobody was allocated) per period, stacked by GPU model. ``rows`` are
    ``accounting.idle.IdleLine``."""
    series: dict[str, dict] = defaultdict(lambda: defaultdict(float))
    periods = set()
    for r in rows:
        series[r.gpu_model][r.period] += float(r.idle_gpu_hours)
        periods.add(r.period)
    ordered = sorted(periods)
    labels = [period_label(p) for p in ordered]
    fig = go.Figure()
    for m in sorted(series):
        values = [series[m].get(p, 0.0) for p in ordered]
        fig.add_trace(go.Bar(name=m, x=labels, y=values, **_hover(values)))
    fig.update_layout(barmode="stack", xaxis_type="category", yaxis_title="idle GPU-hours", **_compact("Idle GPUs"))
    return fig


def _quantile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated quantile of an ascending list (q in 0..1)."""
    if not sorted_values:
        return 0.0
    pos = (len(sorted_values) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def wait_stats(waits: dict[str, list[float]]) -> list[tuple[str, int, float, float, float]]:
    """Per team, from seconds between submission and first admission: (team, jobs, median, p90, max), in
    minutes, by team name."""
    out = []
    for team in sorted(waits):
        v = sorted(waits[team])
        if v:
            out.append((team, len(v), _quantile(v, 0.5) / 60, _quantile(v, 0.9) / 60, v[-1] / 60))
    return out


def wait_time_chart(waits: dict[str, list[float]]) -> go.Figure:
    """Wait-time distribution (submission to first admission, minutes) per team as box plots."""
    fig = go.Figure(
        [go.Box(name=team, y=[s / 60 for s in waits[team]], boxpoints="outliers") for team in sorted(waits)]
    )
    # Plain numbers: SI prefixes ("350μ") mean nothing on an axis of minutes.
    fig.update_layout(yaxis_title="minutes", yaxis_exponentformat="none", yaxis_rangemode="tozero", showlegend=False,
                      **_compact("Wait time to first admission"))
    return fig


def failure_rates(counts: dict[str, tuple[int, int]]) -> list[tuple[str, int, int, float]]:
    """(team, failed, finished, failed / finished) per team with finished jobs, by team name."""
    return [(t, f, n, f / n) for t, (f, n) in sorted(counts.items()) if n]


def failure_rate_chart(rows: list[tuple[str, int, int, float]]) -> go.Figure:
    """Failure rate per team (failed / finished jobs), as percent."""
    fig = go.Figure(
        go.Bar(
            x=[r[0] for r in rows],
            y=[r[3] * 100 for r in rows],
            text=[f"{r[1]}/{r[2]}" for r in rows],
            textposition="auto",
        )
    )
    fig.update_layout(yaxis_title="% of finished jobs", yaxis_range=[0, 100], **_compact("Failure rate"))
    return fig


def queue_depth(
    intervals: Iterable[tuple[str, datetime, datetime]], start: datetime, end: datetime
) -> tuple[list[datetime], dict[str, list[float]]]:
    """Hourly queue depth per team: the average number of that team's jobs waiting during each hour of
    ``[start, end)`` (hours aligned to ``start``), from waiting intervals ``(team, from, to)``.

    Linear in intervals plus hours: an interval adds its part-hours at its two ends and marks the whole hours
    between in a difference row (a backlog of 10,000 jobs waiting for days took 2 s hour by hour)."""
    hours = max(0, math.ceil((end - start).total_seconds() / 3600))
    slots = [start + timedelta(hours=i) for i in range(hours)]
    depth: dict[str, list[float]] = {}
    whole: dict[str, list[int]] = {}  # per team: +1 where a run of whole hours starts, -1 after it ends
    for team, lo, hi in intervals:
        lo, hi = max(lo, start), min(hi, end)
        if hi <= lo:
            continue
        row = depth.setdefault(team, [0.0] * hours)
        a, b = (lo - start).total_seconds() / 3600, (hi - start).total_seconds() / 3600
        i, j = int(a), min(int(b), hours)
        if i == j:
            row[i] += b - a
            continue
        row[i] += i + 1 - a
        if j < hours:
            row[j] += b - j
        if j > i + 1:
            diff = whole.setdefault(team, [0] * (hours + 1))
            diff[i + 1] += 1
            diff[j] -= 1
    for team, diff in whole.items():
        row, running = depth[team], 0
        for k in range(hours):
            running += diff[k]
            row[k] += running
    return slots, depth


def queue_depth_chart(slots: list[datetime], depth: dict[str, list[float]]) -> go.Figure:
    """Jobs waiting per hour (hourly average), stacked by team."""
    labels = [s.strftime("%Y-%m-%d %H:00") for s in slots]
    fig = go.Figure(
        [
            go.Scatter(name=t, x=labels, y=depth[t], mode="lines", stackgroup="q", **_hover(depth[t], _hours))
            for t in sorted(depth)
        ]
    )
    fig.update_layout(yaxis_title="jobs waiting (hourly average)", yaxis_exponentformat="none",
                      **_compact("Queue depth (jobs waiting, hourly average)"))
    return fig


def fairness_chart(rows: Iterable) -> go.Figure:
    """Entitled vs received GPU-hours per team (``accounting.fairness.TeamFairness``)."""
    rows = list(rows)
    teams = [r.team for r in rows]
    entitled, received = [r.entitled_gpu_hours for r in rows], [r.received_gpu_hours for r in rows]
    fig = go.Figure(
        [
            go.Bar(name="entitled GPU-hours", x=teams, y=entitled, **_hover(entitled)),
            go.Bar(name="received GPU-hours", x=teams, y=received, **_hover(received)),
        ]
    )
    fig.update_layout(barmode="group", yaxis_title="GPU-hours", **_compact("Entitled vs received"))
    return fig
