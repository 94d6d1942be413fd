"""Pages for jobs and the cluster. Thin: parse, call one service or selector, render."""

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.db.models import Prefetch
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.utils.crypto import constant_time_compare
from django.views.decorators.http import require_POST

from portal.access import can_manage_job, job_for, jobs_for, submit_teams_for
from scheduler.forms import JobSubmitForm
from scheduler.metrics import render_metrics
from scheduler.models import Allocation, Gpu, Node
from scheduler.models.jobs import ACTIVE_STATES
from scheduler.services import jobs as job_services


@login_required
def job_list(request):
    """My teams' jobs (admins: all), newest first; ?state=active|finished filters."""
    qs = jobs_for(request.user).prefetch_related(
        Prefetch("allocations", queryset=Allocation.objects.filter(ended_at__isnull=True).select_related("node", "gpu"))
    )
    which = request.GET.get("state", "")
    if which == "active":
        qs = qs.filter(state__in=ACTIVE_STATES)
    elif which == "finished":
        qs = qs.exclude(state__in=ACTIVE_STATES)
    jobs = list(qs.order_by("-id")[:200])
    template = "jobs/_rows.html" if request.headers.get("HX-Request") else "jobs/list.html"
    return render(request, template, {"jobs": jobs, "which": which})


@login_required
def job_submit_view(request):
    teams = list(submit_teams_for(request.user))
    form = JobSubmitForm(request.POST or None, teams=teams)
    if request.method == "POST" and form.is_valid():
        try:
            job = job_services.job_submit(user=request.user, **form.submit_kwargs())
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                form.add_error(field if field in form.fields else None, errors)
        else:
            messages.success(request, f"Job #{job.pk} submitted.")
            return redirect("job-detail", job_id=job.pk)
    return render(request, "jobs/submit.html", {"form": form, "teams": teams})


@login_required
@require_POST
def job_quote_partial(request):
    """The quote panel of the submit form, refreshed by htmx whenever a field changes."""
    from scheduler.services.quote import job_quote

    form = JobSubmitForm(request.POST, teams=list(submit_teams_for(request.user)))
    quote, problems = None, []
    if form.is_valid():
        try:
            quote = job_quote(user=request.user, **form.submit_kwargs())
        except ValidationError as exc:
            problems = [f"{k}: {'; '.join(v)}" for k, v in exc.message_dict.items()]
    else:
        problems = [f"{k}: {'; '.join(v)}" for k, v in form.errors.items()]
    return render(request, "jobs/_quote.html", {"quote": quote, "problems": problems})


def _job_context(request, job_id):
    job = job_for(request.user, job_id)
    allocations = list(job.allocations.filter(attempt=job.attempt).select_related("node", "gpu", "gpu__model"))
    log = job.logs.filter(attempt=job.attempt).first()
    return {
        "job": job, "allocations": allocations, "log": log,
        "transitions": list(job.transitions.select_related("actor")),
        "preemptions": list(job.preemptions.select_related("by_job")),
        "can_manage": can_manage_job(request.user, job),
    }


@login_required
def job_detail(request, job_id: int):
    return render(request, "jobs/detail.html", _job_context(request, job_id))


@login_required
def job_log_partial(request, job_id: int):
    """The state badge, reason and log tail, refreshed by htmx while the job is active."""
    return render(request, "jobs/_live.html", _job_context(request, job_id))


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


@login_required
def cluster(request):
    """Nodes and their GPUs with what each GPU holds now."""
    nodes = list(Node.objects.select_related("pool").prefetch_related(
        Prefetch("gpus", queryset=Gpu.objects.filter(present=True).select_related("model").prefetch_related(
            Prefetch("allocations", queryset=Allocation.objects.filter(ended_at__isnull=True).select_related(
                "job", "job__team"), to_attr="open_allocations")
        ))
    ))
    visible = set(jobs_for(request.user).filter(state__in=ACTIVE_STATES).values_list("pk", flat=True))
    return render(request, "cluster.html", {"nodes": nodes, "visible_jobs": visible})
