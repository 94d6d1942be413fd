"""The accounting dashboard. Thin: parse the query, call the report builders and pure charts, render."""

import json
from datetime import date

import plotly.io as pio
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import render

from accounting import charts, periods
from accounting.reports import budget_statuses, idle_for, rated_usage
from accounting.selectors import rollup_time, statement_for, statements_for, waste_by_team
from accounting.selectors_fairness import (
    capacity_over,
    cluster_allocated,
    failure_counts,
    fairness_for,
    visible_team_names,
    wait_seconds,
    waiting_intervals,
)
from portal.access import jobs_for
from scheduler.services.common import db_now


def _figure(fig) -> dict:
    return json.loads(pio.to_json(fig, validate=False))


# The form's labels: an error names the field as the person filling the form sees it.
FIELD_LABELS = {"preset": "Range", "start": "From", "end": "To", "agg": "Aggregate by", "group_by": "Group by"}


def _params(request, today: date) -> tuple[dict, periods.Range, list[str]]:
    """The form's values, a bad one replaced by its default with a message naming its field ("Group by must be
    one of …; got 'planet'")."""
    q = request.GET
    errors = []
    p = {
        "preset": q.get("preset", "30d"),
        "start": q.get("start", ""),
        "end": q.get("end", ""),
        "agg": q.get("agg", "day"),
        "group_by": q.get("group_by", "team"),
    }
    for field, choices, default in (("agg", periods.AGGREGATIONS, "day"), ("group_by", charts.GROUP_BYS, "team")):
        if p[field] not in choices:
            errors.append(f"{FIELD_LABELS[field]} must be one of {', '.join(choices)}; got {p[field]!r}")
            p[field] = default
    rng, problems = _range(p, today)
    if problems:
        errors += problems
        p["preset"] = "30d"
        rng = periods.preset_range("30d", today)
    return p, rng, errors


def _range(p: dict, today: date) -> tuple[periods.Range | None, list[str]]:
    """The range the form asks for, or the messages saying what is wrong with it (each day on its own)."""
    if p["preset"] == "custom":
        problems = []
        for field in ("start", "end"):
            try:
                periods.parse_day(p[field])
            except ValueError as exc:
                problems.append(f"{FIELD_LABELS[field]} {exc}")
        if problems:
            return None, problems
    try:
        return periods.preset_range(p["preset"], today, p["start"], p["end"]), []
    except ValueError as exc:
        return None, [f"{FIELD_LABELS['end' if p['preset'] == 'custom' else 'preset']} {exc}"]


@login_required
def dashboard(request):
    now = db_now()
    today = now.date()
    params, rng, errors = _params(request, today)
    rated = rated_usage(request.user, rng, agg=params["agg"])
    cur = rated.currency
    group_by = params["group_by"]
    top = charts.top_jobs(rated.lines, 10)
    figures = {
        "fig-usage": _figure(charts.usage_over_time(rated.lines, group_by)),
        "fig-cost": _figure(charts.cost_over_time(rated.lines, group_by, cur)),
        "fig-by_model": _figure(charts.cost_by(rated.lines, "gpu_model", cur)),
        "fig-by_kind": _figure(charts.cost_by(rated.lines, "kind", cur)),
        "fig-top_jobs": _figure(charts.top_jobs_chart(top, cur)),
    }
    visible = visible_team_names(request.user)
    horizon = min(rng.end, now)
    waiting = waiting_intervals(visible, start=rng.start, horizon=horizon)
    waste = waste_by_team(request.user, start=rng.start, end=rng.end, now=now, waiting=waiting)
    if waste:
        figures["fig-waste"] = _figure(charts.waste_chart([(w.team, w.gpu_hours_lost, w.queued_hours) for w in waste]))
    if rated.lines:
        figures["fig-efficiency"] = _figure(charts.efficiency_over_time(rated.lines))
    capacity = capacity_over(start=rng.start, end=horizon)
    allocated = cluster_allocated(start=rng.start, end=rng.end, agg=params["agg"])
    idle = idle_for(
        rng, now=now, agg=params["agg"], visible=visible, cards=rated.cards, capacity=capacity, allocated=allocated
    )
    if idle.lines:
        figures["fig-idle"] = _figure(charts.idle_over_time(idle.lines, cur))
    fairness = fairness_for(
        visible, start=rng.start, end=rng.end, now=now, waiting=waiting, capacity=capacity, allocated=allocated
    )
    if fairness:
        figures["fig-fairness"] = _figure(charts.fairness_chart(fairness))
    waits = wait_seconds(visible, start=rng.start, end=rng.end)
    if waits:
        figures["fig-wait"] = _figure(charts.wait_time_chart(waits))
    failures = charts.failure_rates(failure_counts(visible, start=rng.start, end=rng.end))
    if failures:
        figures["fig-failures"] = _figure(charts.failure_rate_chart(failures))
    slots, depth = charts.queue_depth(waiting, rng.start, horizon)
    if depth:
        figures["fig-queue"] = _figure(charts.queue_depth_chart(slots, depth))
    this_month = periods.parse_month(today.strftime("%Y-%m"))
    last_month = periods.preset_range("last-month", today)
    context = {
        "params": params,
        "range": rng,
        "errors": errors,
        "currency": cur,
        "presets": periods.PRESETS,
        "aggregations": periods.AGGREGATIONS,
        "group_bys": [(g, charts.LABELS[g]) for g in charts.GROUP_BYS],
        "total_cost": rated.total_cost,
        "total_gpu_hours": rated.total_gpu_hours,
        "efficiency": rated.efficiency,
        "has_usage": bool(rated.lines),
        "totals": charts.totals_by(rated.lines, charts.key_of(group_by)),
        "group_label": charts.LABELS[group_by],
        "top_jobs": top,
        "unpriced": rated.unpriced,
        # finance sees every team's costs, not every team's jobs: link only the jobs the reader may open
        "openable_jobs": set(jobs_for(request.user).filter(pk__in=[r[0] for r in top]).values_list("pk", flat=True)),
        "figures": figures,
        "budgets": budget_statuses(request.user, this_month),
        "waste": waste,
        "idle": idle,
        "idle_share": idle.shares,
        "total_with_idle": rated.total_cost + sum(idle.shares.values()) + (idle.total if idle.shows_line else 0),
        "fairness": fairness,
        "wait_stats": charts.wait_stats(waits),
        "failures": failures,
        "has_queue": bool(depth),
        "export_months": [today.strftime("%Y-%m"), last_month.start.strftime("%Y-%m")],
        "statements": statements_for(request.user),
        "rolled_until": rollup_time(),
    }
    return render(request, "accounting/dashboard.html", context)


CONTENT_TYPES = {"pdf": "application/pdf", "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"}


@login_required
def statement_download(request, statement_id: int):
    """A stored monthly statement of one of your teams (404 for any other)."""
    statement = statement_for(request.user, statement_id)
    response = HttpResponse(bytes(statement.content), content_type=CONTENT_TYPES[statement.format])
    response["Content-Disposition"] = f'attachment; filename="{statement.filename}"'
    return response
