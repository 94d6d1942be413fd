"""Reads of the preemption credits (rule: ``accounting.credits``) for chargeback, the statements and the job
page, with the same scope and masking as the usage lines."""

from dataclasses import replace
from datetime import datetime
from decimal import Decimal

from django.db.models import OuterRef, Subquery

from accounting.credits import CreditLine, LostWork, credit_lines
from accounting.rating import RateCardVersion
from accounting.selectors import OTHER_MEMBERS, _member_only_teams
from portal.access import cost_teams_for, sees_all_costs
from portal.models import Team
from scheduler.models import Allocation
from scheduler.selectors_lost_work import completed_preemptions


def lost_work(teams: set[str] | None, *, start: datetime | None, end: datetime | None,
              job_id: int | None = None) -> list[LostWork]:
    """Completed preemptions with lost work in ``[start, end)`` (by completion; None: unbounded) of ``teams``
    (None: every team), or of one job, oldest first. One query."""
    model = Allocation.objects.filter(job_id=OuterRef("job_id"), attempt=OuterRef("attempt")).order_by("id")
    rows = completed_preemptions().filter(gpu_seconds_lost__gt=0)
    if start is not None:
        rows = rows.filter(completed_at__gte=start)
    if end is not None:
        rows = rows.filter(completed_at__lt=end)
    if teams is not None:
        rows = rows.filter(job__team__name__in=teams)
    if job_id is not None:
        rows = rows.filter(job_id=job_id)
    rows = rows.annotate(model=Subquery(model.values("gpu__model__name")[:1])).order_by("completed_at", "id")
    return [
        LostWork(preemption_id=pk, completed_at=at, team=team, department=department or team, user=user, job_id=job,
                 job_name=name, attempt=attempt, gpu_model=model or "", by_job_id=by,
                 gpu_seconds=Decimal(repr(lost)))
        for pk, at, team, department, user, job, name, attempt, model, by, lost in rows.values_list(
            "pk", "completed_at", "job__team__name", "job__team__parent__name", "job__submitted_by__username",
            "job_id", "job__name", "attempt", "model", "by_job_id", "gpu_seconds_lost")
    ]


def credits_for(user, *, start: datetime, end: datetime, cards: list[RateCardVersion],
                team: Team | None = None) -> list[CreditLine]:
    """The credit lines ``user`` may see in ``[start, end)`` (their cost teams; ``team`` narrows to one), with
    other people's jobs shown as ``OTHER_MEMBERS`` where ``user`` is a plain member, as in the usage lines."""
    teams = None if sees_all_costs(user) else set(cost_teams_for(user).values_list("name", flat=True))
    if team is not None:
        teams = {team.name} if teams is None or team.name in teams else set()
    lines = credit_lines(lost_work(teams, start=start, end=end), cards)
    masked, me = _member_only_teams(user), user.get_username()
    return [replace(c, lost=replace(c.lost, user=OTHER_MEMBERS)) if c.team in masked and c.user != me else c
            for c in lines]


def job_credits(job) -> dict[int, CreditLine]:
    """The credit of each completed preemption of ``job`` (fetched through the access layer), by preemption
    id: for its page. Three queries."""
    from accounting.selectors import rate_cards

    return {c.preemption_id: c for c in credit_lines(lost_work(None, start=None, end=None, job_id=job.pk),
                                                     rate_cards())}
