"""Reads of the work lost by preemption (recorded by ``scheduler.services.lost_work``; rules in
``scheduler.checkpoints``): the credit to each team's fair-share usage, and the lost work of a job."""

from datetime import datetime, timedelta

from django.db.models import OuterRef, Subquery

from scheduler.checkpoints import lost_in_window
from scheduler.models import Allocation, Preemption


def completed_preemptions():
    """Preemptions whose victim's processes are gone: their ``gpu_seconds_lost`` is measured, not estimated."""
    return Preemption.objects.filter(completed_at__isnull=False)


def lost_work_credits(now: datetime, half_life_s: float) -> dict[str, float]:
    """Each team's lost GPU-seconds as ``scheduler.snapshot.decayed_usage`` counted them, to take back out of
    its fair-share usage: the lost part of an allocation ended when its preemption completed, so it carries
    that moment's weight 0.5 ** (age / half-life), and only the part inside the four half-lives counted
    there. One query."""
    since = now - timedelta(seconds=4 * half_life_s)
    rows = completed_preemptions().filter(completed_at__gte=since, completed_at__lte=now, gpu_seconds_lost__gt=0)
    credits: dict[str, float] = {}
    window_start, now_s = since.timestamp(), now.timestamp()
    for team, lost, work_since, completed in rows.values_list(
            "job__team__name", "gpu_seconds_lost", "work_since", "completed_at").iterator(chunk_size=2000):
        end = completed.timestamp()
        counted = lost_in_window(lost, (work_since or completed).timestamp(), end, window_start)
        credits[team] = credits.get(team, 0.0) + counted * 0.5 ** (max(0.0, now_s - end) / half_life_s)
    return credits


def lost_work_by_team_model(teams: set[str] | None, *, start: datetime, end: datetime) -> dict[tuple[str, str], float]:
    """Lost GPU-seconds of the preemptions completed in ``[start, end)`` per (team, GPU model) of ``teams``
    (None: every team): what a fairness statement shows as credited. One query."""
    model = Allocation.objects.filter(job_id=OuterRef("job_id"), attempt=OuterRef("attempt")).order_by("id")
    rows = completed_preemptions().filter(completed_at__gte=start, completed_at__lt=end, gpu_seconds_lost__gt=0)
    if teams is not None:
        rows = rows.filter(job__team__name__in=teams)
    out: dict[tuple[str, str], float] = {}
    for team, gpu_model, lost in rows.annotate(model=Subquery(model.values("gpu__model__name")[:1])).values_list(
            "job__team__name", "model", "gpu_seconds_lost"):
        out[(team, gpu_model or "")] = out.get((team, gpu_model or ""), 0.0) + lost
    return out
