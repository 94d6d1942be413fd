"""What-if pages for platform admins: start a replay, watch its progress, compare the outcome."""

import json

from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render

from scheduler.charts import whatif_figures
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
                                period_end=form.cleaned_data["period_end"], policy=form.cleaned_data["policy"],
                                changes=form.changes())
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                form.add_error(field if field in form.fields else None, errors)
        else:
            return redirect("whatif-detail", run_id=run.pk)
    runs = WhatIfRun.objects.select_related("created_by")[:50]
    return render(request, "whatif/list.html", {"form": form, "runs": runs})


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
    return render(request, template, {"run": run, "figures": figures, "rows": rows})
