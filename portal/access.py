"""The tenancy access layer: the only way views, APIs and exports fetch tenant-owned objects.

A request for another team's object fails exactly like a request for a missing one (404), so an outsider
cannot even learn that it exists. Platform admins (staff) see everything.
"""

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import QuerySet
from django.http import Http404

from portal.models import Membership, Team

User = AbstractBaseUser | AnonymousUser


def is_platform_admin(user: User) -> bool:
    """Staff users govern the whole platform."""
    return bool(user.is_authenticated and user.is_staff)


FINANCE_GROUP = "finance"


def sees_all_costs(user: User) -> bool:
    """Platform admins and members of the ``finance`` group see every team's usage and cost (read only:
    finance governs nothing and sees no job details beyond what accounting shows)."""
    if not user.is_authenticated:
        return False
    cached = getattr(user, "_rota_sees_all_costs", None)
    if cached is None:  # asked by several selectors per request: one query per user object
        cached = is_platform_admin(user) or user.groups.filter(name=FINANCE_GROUP).exists()
        user._rota_sees_all_costs = cached
    return cached


def is_finance_only(user: User) -> bool:
    """A finance user who is on no team: accounting is all there is for them (no jobs, no submit)."""
    return (sees_all_costs(user) and not is_platform_admin(user)
            and not Membership.objects.filter(user=user).exists())


def cost_teams_for(user: User) -> QuerySet[Team]:
    """Teams whose usage and cost ``user`` may see."""
    return Team.objects.all() if sees_all_costs(user) else teams_for(user)


def teams_for(user: User) -> QuerySet[Team]:
    """Teams whose data ``user`` may see: all for platform admins, else the teams they belong to."""
    if not user.is_authenticated:
        return Team.objects.none()
    if is_platform_admin(user):
        return Team.objects.all()
    return Team.objects.filter(memberships__user=user).distinct()


def submit_teams_for(user: User) -> QuerySet[Team]:
    """Teams ``user`` may submit work for: only teams they are a member of (admins included)."""
    if not user.is_authenticated:
        return Team.objects.none()
    return Team.objects.filter(memberships__user=user).distinct()


def role_in(user: User, team: Team) -> str | None:
    """``user``'s role in ``team`` (member / team-admin), or None."""
    if not user.is_authenticated:
        return None
    return Membership.objects.filter(user=user, team=team).values_list("role", flat=True).first()


def jobs_for(user: User) -> QuerySet:
    """Jobs ``user`` may see."""
    from scheduler.models import Job

    qs = Job.objects.select_related("team", "submitted_by", "gpu_model", "priority_class", "pool")
    if not user.is_authenticated:
        return qs.none()
    if is_platform_admin(user):
        return qs
    return qs.filter(team__memberships__user=user)


def job_for(user: User, job_id: int | str):
    """The job ``job_id`` if ``user`` may see it, else Http404 (the same answer as for a missing job)."""
    try:
        pk = int(job_id)
    except (TypeError, ValueError):
        raise Http404("No such job") from None
    job = jobs_for(user).filter(pk=pk).first()
    if job is None:
        raise Http404("No such job")
    return job


def job_for_member(user: User, job_id: int | str):
    """The job ``job_id`` if ``user`` is a member of its team, else Http404: for stepping into a team's running
    work (its notebooks), which governing the platform does not grant, so platform admins get in only as
    members."""
    from scheduler.models import Job

    try:
        pk = int(job_id)
    except (TypeError, ValueError):
        raise Http404("No such job") from None
    job = Job.objects.filter(pk=pk, team__in=submit_teams_for(user)).first() if user.is_authenticated else None
    if job is None:
        raise Http404("No such job")
    return job


def arrays_for(user: User) -> QuerySet:
    """Job arrays ``user`` may see (those of the teams whose jobs they may see)."""
    from scheduler.models import JobArray

    qs = JobArray.objects.select_related("team", "submitted_by")
    if not user.is_authenticated:
        return qs.none()
    if is_platform_admin(user):
        return qs
    return qs.filter(team__memberships__user=user)


def array_for(user: User, array_id: int | str):
    """The job array ``array_id`` if ``user`` may see it, else Http404 (as for a missing one)."""
    try:
        pk = int(array_id)
    except (TypeError, ValueError):
        raise Http404("No such array") from None
    job_array = arrays_for(user).filter(pk=pk).first()
    if job_array is None:
        raise Http404("No such array")
    return job_array


def can_manage_job(user: User, job) -> bool:
    """Whether ``user`` may cancel/hold/release ``job``: its submitter, a team-admin of its team, or a
    platform admin. Other members of the team may see it but not act on it."""
    if is_platform_admin(user):
        return True
    if job.submitted_by_id == user.pk:
        return True
    return role_in(user, job.team) == Membership.TEAM_ADMIN


def can_manage_array(user: User, job_array) -> bool:
    """Whether ``user`` may cancel a job array: as for its tasks (``can_manage_job``)."""
    if is_platform_admin(user) or job_array.submitted_by_id == user.pk:
        return True
    return role_in(user, job_array.team) == Membership.TEAM_ADMIN
