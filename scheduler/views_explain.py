"""The job page's "what would make it start" panel and its one-click resubmit with a change."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from portal.access import can_manage_job, job_for
from portal.throttle import QuoteThrottle
from scheduler.services import jobs as job_services
from scheduler.services.explain import RESUBMIT_FIELDS, job_explain

INT_FIELDS = ("gpus", "time_limit_minutes")


@login_required
def job_explain_partial(request, job_id: int):
    """The panel, loaded once by htmx: the engine's trials are a few scheduling cycles, counted like quotes."""
    job = job_for(request.user, job_id)
    throttle = QuoteThrottle()
    context = {"job": job, "can_manage": can_manage_job(request.user, job), "explain": None, "problem": ""}
    if not throttle.allow_request(request, None):
        context["problem"] = throttle.refusal().capitalize()
    else:
        context["explain"] = job_explain(job=job)
    return render(request, "jobs/_explain.html", context)


@login_required
@require_POST
def job_resubmit_view(request, job_id: int):
    """Cancel the job and submit a copy with the posted change; go to the new job."""
    job = job_for(request.user, job_id)
    changes = {}
    for field in RESUBMIT_FIELDS:
        value = request.POST.get(field)
        if value is None:
            continue
        if field in INT_FIELDS:
            try:
                value = int(value)
            except ValueError:
                messages.error(request, f"{field}: must be a whole number; got {value[:20]!r}")
                return redirect("job-detail", job_id=job.pk)
        changes[field] = value
    try:
        new = job_services.job_resubmit(user=request.user, job=job, changes=changes)
    except job_services.NotAllowed as exc:
        return HttpResponse(str(exc), status=403)
    except ValidationError as exc:
        messages.error(request, "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items()))
        return redirect("job-detail", job_id=job.pk)
    messages.success(request, f"Job #{job.pk} cancelled and resubmitted as #{new.pk}.")
    return redirect("job-detail", job_id=new.pk)
