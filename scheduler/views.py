"""Pages for jobs and the cluster. Thin: parse, call one service or selector, render."""

import json
from dataclasses import replace
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db import transaction
from django.db.models import Avg, Max
from django.db.models.functions import Trunc
from django.http import Http404, HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.crypto import constant_time_compare
from django.views.decorators.http import require_POST

from portal.access import array_for, can_manage_array, can_manage_job, job_for, jobs_for, submit_teams_for, teams_for
from portal.csvutil import csv_response
from portal.teams.selectors import can_manage_team, job_template_for, job_templates
from portal.teams.services import job_template_save
from portal.throttle import QuoteThrottle
from scheduler.forms import JobSubmitForm, kind_cards
from scheduler.kinds import KINDS
from scheduler.metrics import render_metrics
from scheduler.models import Node, Pool
from scheduler.models.jobs import JobState
from scheduler.selectors import (
    COLUMNS,
    SORT_LABELS,
    SORTS,
    JobFilter,
    array_state_counts,
    cluster_nodes,
    job_attempts,
    job_table,
)
from scheduler.selectors_policies import job_decision_policies
from scheduler.services import arrays as array_services
from scheduler.services import jobs as job_services
from scheduler.services.runtime import job_how_it_runs

PAGE_ROWS = 200
COUNT_AHEAD = 10_000  # rows the jobs table counts past the page it shows
GPU_CHART_POINTS = 5000  # per-minute points (GPU x minute) the job GPU chart draws at most


@login_required
def job_list(request):
    """The jobs table: mine / my teams' (admins: all), filter, search, sort, columns, live refresh. An
    array is one row (its tasks' states counted) unless ``?array=N`` shows that array's tasks."""
    f, teams = _job_filter(request)
    job_array = array_for(request.user, f.array) if f.array is not None else None
    table = job_table(request.user, f)
    first = (f.page - 1) * PAGE_ROWS
    # Counted only up to COUNT_AHEAD rows past this page's start (the table refreshes every 3 s in every
    # open tab; an admin's table holds every job ever run): beyond that the pager says "more than".
    total = table[:first + COUNT_AHEAD + 1].count()
    exact = total <= first + COUNT_AHEAD
    if exact and f.page > 1 and first >= total:  # past the end (the table shrank, or a typed URL): the last
        f = replace(f, page=max(1, -(-total // PAGE_ROWS)))
        first = (f.page - 1) * PAGE_ROWS
    rows = list(table[first:first + PAGE_ROWS])
    _mark_array_rows(rows, f)
    pages = max(1, -(-total // PAGE_ROWS)) if exact else None
    context = {
        "jobs": rows, "f": f, "job_array": job_array,
        "array_counts": array_state_counts([job_array.pk])[job_array.pk] if job_array else None,
        "can_manage_array": job_array is not None and can_manage_array(request.user, job_array),
        "columns": f.columns, "column_names": COLUMNS, "kinds": list(KINDS),
        "states": JobState.values, "teams": teams, "sorts": [(key, SORT_LABELS[key]) for key in SORTS],
        "pager": {"total": total if exact else first + COUNT_AHEAD, "exact": exact,
                  "first": first + 1 if rows else 0, "last": first + len(rows), "page": f.page, "pages": pages,
                  "prev": f.at_page(f.page - 1).as_query() if f.page > 1 else None,
                  "next": f.at_page(f.page + 1).as_query() if not exact or f.page < pages else None},
    }
    template = "jobs/_list_table.html" if request.headers.get("HX-Request") else "jobs/list.html"
    return render(request, template, context)


def _mark_array_rows(rows: list, f: JobFilter) -> None:
    """Outside one array's view, and unless every task is its own row, a task row stands for its whole array:
    give it the array's state counts (one query for the page)."""
    if f.array is not None or f.each_task:
        return
    counts = array_state_counts({job.array_id for job in rows if job.array_id is not None})
    for job in rows:
        if job.array_id is not None:
            job.array_counts = sorted(counts[job.array_id].items())


@login_required
@require_POST
def array_cancel_view(request, array_id: int):
    """Cancel every task of an array that has not ended."""
    job_array = array_for(request.user, array_id)
    try:
        n = array_services.array_cancel(user=request.user, job_array=job_array)
    except job_services.NotAllowed as exc:
        return HttpResponse(str(exc), status=403)
    messages.success(request, f"Array {job_array.pk}: cancel requested for {n} task{'s' if n != 1 else ''}.")
    return redirect(f"{reverse('job-list')}?array={job_array.pk}")


def _job_filter(request) -> tuple[JobFilter, list[str]]:
    """The jobs table's filter from the query string, and the teams the reader may filter by (a team that
    is not one of them is named as an error, like a bad state or kind)."""
    f = JobFilter.from_params(request.GET)
    teams = list(teams_for(request.user).values_list("name", flat=True))
    if f.team and f.team not in teams:
        f.errors.append("team must be one of yours" if teams else "you belong to no team to filter by")
        f.team = ""
    return f, teams


@login_required
def job_list_csv(request):
    """The same table as CSV (every matching row, streamed); cells that a spreadsheet would run as a
    formula are neutralized. A bad filter is refused (400, naming it) rather than widened to every row."""
    f, _teams = _job_filter(request)
    if f.errors:
        return HttpResponseBadRequest("; ".join(f.errors), content_type="text/plain; charset=utf-8")
    header = ["id", "name", "team", "user", "kind", "gpus", "gpu_fraction", "gpu_model", "state",
              "pending_reason", "queue_position", "created_at", "started_at", "finished_at", "exit_code"]

    def rows():
        yield header
        for job in job_table(request.user, f).iterator(chunk_size=500):
            yield [job.pk, job.name, job.team.name, job.submitted_by.username, job.kind, job.gpus, job.gpu_fraction,
                   job.gpu_model.name if job.gpu_model else "", job.state,
                   f"{job.pending_reason_code} {job.pending_reason_message}".strip(), job.queue_position,
                   job.created_at.isoformat(), job.started_at.isoformat() if job.started_at else "",
                   job.finished_at.isoformat() if job.finished_at else "", job.exit_code]

    return csv_response(rows(), "rota-jobs.csv")


def _submit_initial(request) -> dict:
    """Initial values of the submit form: copy of a job, a saved template, a kind card, a team."""
    initial: dict = {}
    if request.GET.get("copy"):
        initial = JobSubmitForm.initial_from(job_for(request.user, request.GET["copy"]))
    elif request.GET.get("template"):
        initial = JobSubmitForm.initial_from_template(job_template_for(request.user, request.GET["template"]))
    elif request.GET.get("kind"):
        initial = JobSubmitForm.initial_for_kind(request.GET["kind"])
    if request.GET.get("team") and "team" not in initial:
        initial["team"] = request.GET["team"]
    return initial


def _save_template(request, form, teams) -> bool:
    """Save the form's values as a template of its team; errors go inline on the form."""
    team = next((t for t in teams if t.name == form.cleaned_data["team"]), None)
    try:
        template = job_template_save(user=request.user, team=team, name=request.POST.get("template_name", ""),
                                     kind=form.cleaned_data["kind"], fields=form.template_fields())
    except PermissionDenied as exc:
        form.add_error(None, str(exc))
    except ValidationError as exc:
        form.template_errors = [m for ms in exc.message_dict.values() for m in ms]
    else:
        messages.success(request, f"Template {template.name!r} saved for team {team.name}.")
        return True
    return False


def _submit_replicas(user, replicas: int, request: dict) -> list:
    """Submit ``replicas`` copies of an inference service as jobs ``name-1`` … ``name-N`` (all or none);
    one replica keeps its name."""
    if replicas <= 1:
        return [job_services.job_submit(user=user, **request)]
    base = request["name"][: job_services.MAX_NAME - 4]
    with transaction.atomic():
        return [job_services.job_submit(user=user, **{**request, "name": f"{base}-{i}"})
                for i in range(1, replicas + 1)]


@login_required
def job_submit_view(request):
    """The submit page: kind cards with their defaults, saved templates, the form and its live quote.
    POST ``action=save-template`` saves the values as a team template instead of submitting."""
    teams = list(submit_teams_for(request.user))
    initial = _submit_initial(request) if request.method == "GET" else {}
    form = JobSubmitForm(request.POST or None, teams=teams, initial=initial)
    form.template_errors = []
    if request.method == "POST" and form.is_valid():
        if request.POST.get("action") == "save-template":
            _save_template(request, form, teams)
        else:
            try:
                if form.cleaned_data.get("array"):
                    job_array = array_services.array_submit(user=request.user, array=form.cleaned_data["array"],
                                                            **form.submit_kwargs())
                    messages.success(request, f"Array {job_array.pk} of {job_array.size} tasks submitted.")
                    return redirect(f"{reverse('job-list')}?array={job_array.pk}")
                jobs = _submit_replicas(request.user, form.replica_count(), form.submit_kwargs())
            except ValidationError as exc:
                for field, errors in exc.message_dict.items():
                    form.add_error(field if field in form.fields else None, errors)
            else:
                ids = ", ".join(f"#{j.pk}" for j in jobs)
                messages.success(request, f"Job{'s' if len(jobs) > 1 else ''} {ids} submitted.")
                return redirect("job-detail", job_id=jobs[0].pk)
    templates = [(t, job_templates(team=t), can_manage_team(request.user, t)) for t in teams]
    return render(request, "jobs/submit.html", {
        "form": form, "teams": teams, "kinds": kind_cards(), "presets": JobSubmitForm.kind_presets(),
        "team_templates": templates,
        "can_save_templates": any(manage for _, _, manage in templates),
        "current_kind": form["kind"].value() or "training",
    })


@login_required
@require_POST
def job_quote_partial(request):
    """The quote panel of the submit form, refreshed by htmx whenever a field changes."""
    from scheduler.services.quote import job_quote

    form = JobSubmitForm(request.POST, teams=list(submit_teams_for(request.user)))
    quote, problems, replicas = None, [], 1

    def label(name: str) -> str:
        field = form.fields.get(name)
        return str(field.label or name.replace("_", " ").capitalize()) if field else name

    throttle = QuoteThrottle()
    if form.is_valid():
        replicas = form.replica_count()
        try:
            if not throttle.allow_request(request, None):  # (only a form that can be quoted counts)
                problems = [throttle.refusal().capitalize()]
            else:
                quote = job_quote(user=request.user, **form.submit_kwargs())
        except ValidationError as exc:
            problems = [f"{label(k)}: {'; '.join(v)}" for k, v in exc.message_dict.items()]
    else:
        # A field not filled in yet is no problem to report while the user is still typing: the panel
        # keeps its hint until the form could be quoted, and names only values that are wrong.
        for k, errors in form.errors.as_data().items():
            messages = [m for e in errors if e.code != "required" for m in e.messages]
            if messages:
                problems.append("; ".join(messages) if k == "__all__" else f"{label(k)}: {'; '.join(messages)}")
    return render(request, "jobs/_quote.html", {"quote": quote, "problems": problems, "replicas": replicas})


def _job_context(request, job_id):
    job = job_for(request.user, job_id)
    allocations = list(job.allocations.filter(attempt=job.attempt).select_related("node", "gpu", "gpu__model"))
    log = job.logs.filter(attempt=job.attempt).first()
    # A restarted job (a crashed service backing off, a preempted job waiting) has nothing to show for its
    # new attempt yet: the last attempt's output says why it ended.
    earlier = None
    if (log is None or not log.content) and job.attempt > 1:
        earlier = job.logs.filter(attempt__lt=job.attempt).exclude(content="").order_by("-attempt").first()
    transitions = list(job.transitions.select_related("actor"))
    preemptions = list(job.preemptions.select_related("by_job"))
    pending_policy = job_decision_policies(transitions=transitions, preemptions=preemptions,
                                           waiting=bool(job.pending_reason_code))
    return {
        "job": job, "allocations": allocations, "log": log, "earlier_log": earlier,
        "transitions": transitions,
        "attempts": job_attempts(job, transitions, list(job.allocations.select_related("node"))),
        "preemptions": _with_credits(job, preemptions), "pending_policy": pending_policy,
        "events": list(job.events.all()[:50]),
        "can_manage": can_manage_job(request.user, job),
        "can_release": job_services.can_release(request.user, job),
        "runs": job_how_it_runs(job, allocations),
    }


def _with_credits(job, preemptions: list) -> list:
    """The job's ``preemptions``, each completed one with its credit (``accounting.credits``) as ``credit``."""
    from accounting.selectors_credits import job_credits

    credits = job_credits(job) if any(p.completed_at for p in preemptions) else {}
    for p in preemptions:
        p.credit = credits.get(p.pk)
    return preemptions


@login_required
def job_detail(request, job_id: int):
    return render(request, "jobs/detail.html", _job_context(request, job_id))


@login_required
def job_log_partial(request, job_id: int):
    """The state badge, reason and log tail, refreshed by htmx while the job is active."""
    return render(request, "jobs/_live.html", _job_context(request, job_id))


@login_required
def job_gpu_chart(request, job_id: int):
    """The job's per-GPU utilization and memory over time (raw samples, then hourly rollups)."""
    from scheduler.charts import gpu_usage_figure

    job = job_for(request.user, job_id)
    # Raw samples (one per GPU per heartbeat) averaged per minute, the newest GPU_CHART_POINTS of those: the
    # chart keeps up with a long run (and stays small) instead of stopping at its first samples.
    minutes = (job.gpu_samples.annotate(minute=Trunc("at", "minute"))
               .values("node__name", "gpu__index", "minute")
               .annotate(util=Avg("util_pct"), mem=Max("mem_used_mb"))
               .order_by("-minute", "node__name", "gpu__index"))[:GPU_CHART_POINTS]
    samples = [(m["node__name"], m["gpu__index"], m["minute"], m["util"], m["mem"]) for m in reversed(minutes)]
    rollups = list(job.gpu_rollups.select_related("gpu", "gpu__node").order_by("hour").values_list(
        "gpu__node__name", "gpu__index", "hour", "util_avg", "mem_used_max_mb"))
    rows = [(f"{n}/gpu{i}", at, u, m) for n, i, at, u, m in rollups + samples]
    if not rows:
        return HttpResponse('<p class="muted">No GPU samples yet.</p>')
    figure = gpu_usage_figure(rows)
    return render(request, "jobs/_gpu_chart.html", {"figure": json.loads(figure.to_json()), "job": job})


@login_required
@require_POST
def job_action(request, job_id: int, action: str):
    actions = {"cancel": job_services.job_cancel, "hold": job_services.job_hold, "release": job_services.job_release}
    if action not in actions:
        raise Http404("No such action")
    job = job_for(request.user, job_id)
    try:
        actions[action](user=request.user, job=job)
        messages.success(request, f"Job #{job.pk}: {action} requested.")
    except job_services.NotAllowed as exc:
        return HttpResponse(str(exc), status=403)
    except ValidationError as exc:
        messages.error(request, "; ".join(exc.messages))
    return redirect("job-detail", job_id=job.pk)


def metrics(request):
    """Prometheus scrape endpoint. Open in DEBUG; otherwise a platform admin's session or
    ``Authorization: Bearer $ROTA_METRICS_TOKEN``."""
    token = settings.ROTA_METRICS_TOKEN
    header = request.headers.get("Authorization", "")
    allowed = settings.DEBUG or (request.user.is_authenticated and request.user.is_staff) or (
        token and constant_time_compare(header, f"Bearer {token}")
    )
    if not allowed:
        return HttpResponse("metrics need a platform admin or the metrics token\n", status=403,
                            content_type="text/plain")
    return HttpResponse(render_metrics(), content_type="text/plain; version=0.0.4; charset=utf-8")


CLUSTER_PAGE_NODES = 50


@login_required
def cluster(request):
    """Nodes and their GPUs with what each GPU holds now: a page of CLUSTER_PAGE_NODES nodes, by pool and state
    if asked, under totals for all of them (a 300-node cluster drew 2,400 GPU cells every 5 s)."""
    pools = list(Pool.objects.order_by("name").values_list("name", flat=True))
    pool = request.GET.get("pool", "")
    state = request.GET.get("state", "")
    nodes, totals = cluster_nodes(pool=pool if pool in pools else "", state=state)
    page = Paginator(nodes, CLUSTER_PAGE_NODES).get_page(request.GET.get("page"))
    shown = list(page)  # the page's nodes, with their GPUs and open allocations prefetched
    on_page = {a.job_id for n in shown for g in n.gpus.all() for a in g.open_allocations}
    visible = set(jobs_for(request.user).filter(pk__in=on_page).values_list("pk", flat=True))
    query = {k: v for k, v in (("pool", pool if pool in pools else ""), ("state", state)) if v}
    return render(request, "cluster.html", {
        "nodes": shown, "visible_jobs": visible, "page": page, "totals": totals, "pools": pools, "pool": pool,
        "states": Node.STATES, "state": state, "query": urlencode(query)})
