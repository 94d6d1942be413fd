"""What-if pages for platform admins: start a replay, watch its progress, compare the outcome."""

import json

from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render

from scheduler.charts import whatif_figures
from scheduler.core.reasons import fmt_duration
from scheduler.forms_whatif import WhatIfForm
from scheduler.models import WhatIfRun
from scheduler.whatif import whatif_create


def _staff(request) -> None:
    if not request.user.is_staff:
        raise Http404("No such page")


@login_required
def whatif_list(request):
    _staff(request)
    form = WhatIfForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            run = whatif_create(user=request.user, name=form.cleaned_data["name"],
                                period_start=form.cleaned_data["period_start"],
                                period_end=form.cleaned_data["period_end"],
                                baseline_policy=form.cleaned_data["baseline_policy"],
                                changed_policy=form.cleaned_data["changed_policy"], changes=form.changes())
        except ValidationError as exc:
            for key, errors in exc.message_dict.items():
                field = _form_field(key)
                form.add_error(field if field in form.fields else None, errors)
        else:
            return redirect("whatif-detail", run_id=run.pk)
    runs = WhatIfRun.objects.select_related("created_by", "baseline_policy__policy", "changed_policy__policy")[:50]
    return render(request, "whatif/list.html", {"form": form, "runs": runs})


def _form_field(key: str) -> str:
    """The form field an error of ``whatif_create`` belongs to ("changes.quotas.vision/h100-80gb.limit" is
    the cell q:vision:h100-80gb:limit; "changes.priorities.batch" is p:batch), else the key itself."""
    if key.startswith("changes.quotas."):
        cell, _, field = key.removeprefix("changes.quotas.").rpartition(".")
        return "q:" + cell.replace("/", ":", 1) + ":" + field
    for prefix, short in (("changes.priorities.", "p:"), ("changes.pool_scale.", "s:")):
        if key.startswith(prefix):
            return short + key.removeprefix(prefix)
    return key


@login_required
def whatif_detail(request, run_id: int):
    _staff(request)
    run = get_object_or_404(WhatIfRun, pk=run_id)
    figures = [json.loads(f.to_json()) for f in whatif_figures(run.result)] if run.state == WhatIfRun.DONE else []
    teams = sorted(set(run.result.get("actual", {})) | set(run.result.get("changed", {})))
    rows = []
    for team in teams:
        row = {"team": team}
        for series in ("actual", "baseline", "changed"):
            values = dict(run.result.get(series, {}).get(team, {}))
            values["avg_wait_min"] = values.get("avg_wait_s", 0.0) / 60
            row[series] = values
        rows.append(row)
    template = "whatif/_status.html" if request.headers.get("HX-Request") else "whatif/detail.html"
    return render(request, template, {"run": run, "figures": figures, "rows": rows, "summary": _summary(run)})


SUMMARY_ROWS = (  # (label, summary key, kind): the whole replay, as configured against with the changes
    ("Jobs completed", "completed", "count"), ("Still unfinished at the end", "unfinished", "count"),
    ("Average job completion time", "avg_jct_s", "time"), ("Average wait", "avg_queue_s", "time"),
    ("Wait, 95th percentile", "p95_queue_s", "time"), ("GPU utilization", "utilization", "share"),
    ("Preemptions", "preemptions", "count"), ("GPU-hours lost to preemption", "gpu_hours_lost", "hours"),
)


def _shown(value, kind: str, signed: bool = False) -> str:
    if not isinstance(value, int | float):
        return "—"
    sign = ("+" if value > 0 else "−" if value < 0 else "") if signed else ""
    if signed and value == 0:
        return "same"
    size = abs(value) if signed else value
    if kind == "time":
        text = fmt_duration(size) if size >= 0.5 else "0 s"  # a length, not a moment ("now")
    elif kind == "share":
        text = f"{size * 100:.1f}" + (" pts" if signed else "%")
    elif kind == "hours":
        text = f"{size:.2f}"
    else:
        text = f"{size:g}"
    return sign + text


def _summary(run: WhatIfRun) -> list[dict]:
    """Rows of the replay's overall figures, as shown: as configured, with the changes, and the change."""
    summary = run.result.get("summary") or {}
    before, after = summary.get("baseline") or {}, summary.get("changed") or {}
    rows = []
    for label, key, kind in SUMMARY_ROWS:
        a, b = before.get(key), after.get(key)
        delta = b - a if isinstance(a, int | float) and isinstance(b, int | float) else None
        rows.append({"label": label, "baseline": _shown(a, kind), "changed": _shown(b, kind),
                     "delta": _shown(delta, kind, signed=True) if delta is not None else ""})
    return rows
