"""The home dashboard."""

from django.contrib.auth.decorators import login_required
from django.db.models import Count, Prefetch, Q, Sum
from django.shortcuts import redirect, render
from django.templatetags.static import static

from portal.access import is_finance_only, jobs_for, teams_for
from scheduler.models import Allocation, Gpu, Node, Quota
from scheduler.models.jobs import HOLDING_STATES, WAITING_STATES, JobState
from scheduler.selectors import DEFAULT_COLUMNS


def favicon(request):
    """``/favicon.ico``, which browsers ask for on pages that name no icon (Django's error pages): the
    shipped one."""
    return redirect(static("favicon.svg"), permanent=True)


@login_required
def home(request):
    """Your teams' queue at a glance (with why work waits), their quotas and the cluster's capacity. A
    finance user on no team has no queue: the accounting pages are their home."""
    if is_finance_only(request.user):
        return redirect("accounting")
    jobs = jobs_for(request.user)
    counts = jobs.aggregate(
        pending=Count("id", filter=Q(state=JobState.PENDING)),
        running=Count("id", filter=Q(state__in=HOLDING_STATES)),
        held=Count("id", filter=Q(state=JobState.HELD)),
        failed=Count("id", filter=Q(state=JobState.FAILED)),
    )
    waiting = list(jobs.filter(state__in=WAITING_STATES).exclude(pending_reason_code="")
                   .values("pending_reason_code").annotate(n=Count("id")).order_by("-n", "pending_reason_code")[:8])
    teams = list(teams_for(request.user).order_by("name"))
    quotas = list(Quota.objects.filter(team__in=teams).select_related("team", "gpu_model", "pool"))
    in_use = {}
    for row in Allocation.objects.filter(ended_at__isnull=True, job__team__in=teams).values(
        "job__team", "gpu__model"
    ).annotate(total=Sum("share_milli")):
        in_use[(row["job__team"], row["gpu__model"])] = row["total"] / 1000
    quota_rows = [
        {"quota": q, "in_use": in_use.get((q.team_id, q.gpu_model_id), 0.0)} for q in quotas
    ]
    capacity = Gpu.objects.filter(present=True, node__state=Node.READY).values("model__name").annotate(n=Count("id"))
    recent = list(jobs.prefetch_related(Prefetch(
        "allocations", queryset=Allocation.objects.filter(ended_at__isnull=True).select_related("node", "gpu"),
        to_attr="open_allocations"))[:10])
    return render(request, "home.html", {
        "counts": counts, "quota_rows": quota_rows, "columns": DEFAULT_COLUMNS, "capacity": list(capacity),
        "recent": recent, "teams": teams, "waiting": waiting,
    })
