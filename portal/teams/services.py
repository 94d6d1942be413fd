"""Team writes: members and their roles. Only the team's team-admins and platform admins may call these;
views check first and the services check again (failing closed). Each change is audited in the same
transaction."""

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from portal.audit import audit_record
from portal.models import Membership, Team
from portal.teams.selectors import can_manage_team
from scheduler.forms import template_value_errors
from scheduler.kinds import KINDS
from scheduler.models import JobTemplate

ROLES = [r for r, _ in Membership.ROLE_CHOICES]


def _require_manager(user, team: Team) -> None:
    if not can_manage_team(user, team):
        raise PermissionDenied("only the team's team-admins and platform admins may manage its members")


def _other_admins(team: Team, username: str) -> int:
    return Membership.objects.filter(team=team, role=Membership.TEAM_ADMIN).exclude(user__username=username).count()


def membership_set(*, actor, team: Team, username: str, role: str, reason: str = "") -> Membership:
    """Add ``username`` to ``team`` with ``role``, or change the role of an existing member."""
    _require_manager(actor, team)
    username = (username or "").strip()
    errors = {}
    if role not in ROLES:
        errors["role"] = f"must be one of {', '.join(ROLES)}; got {role!r}"
    user = get_user_model().objects.filter(username=username).first() if username else None
    if user is None:
        errors["username"] = f"no user named {username!r}" if username else "must not be empty"
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        Team.objects.select_for_update().filter(pk=team.pk).first()  # serializes member edits of a team
        membership = Membership.objects.filter(team=team, user=user).first()
        before = {"role": membership.role} if membership else None
        if membership is not None and membership.role == role:
            return membership
        if (membership is not None and membership.role == Membership.TEAM_ADMIN
                and not _other_admins(team, username)):
            raise ValidationError({"role": f"{username} is the last team-admin of {team.name}; add another first"})
        if membership is None:
            membership = Membership.objects.create(team=team, user=user, role=role)
        else:
            membership.role = role
            membership.save(update_fields=["role"])
        audit_record(actor=actor, action="membership.create" if before is None else "membership.update",
                     object_type="membership", object_id=membership.pk, object_name=f"{team.name}/{username}",
                     before=before, after={"role": role}, reason=reason)
    return membership


def membership_remove(*, actor, team: Team, username: str, reason: str = "") -> None:
    """Remove ``username`` from ``team``. The last team-admin cannot be removed."""
    _require_manager(actor, team)
    with transaction.atomic():
        Team.objects.select_for_update().filter(pk=team.pk).first()
        membership = Membership.objects.filter(team=team, user__username=username).first()
        if membership is None:
            raise ValidationError({"username": f"{username!r} is not a member of {team.name}"})
        if membership.role == Membership.TEAM_ADMIN and not _other_admins(team, username):
            raise ValidationError({"username": f"{username} is the last team-admin of {team.name}; add another first"})
        audit_record(actor=actor, action="membership.delete", object_type="membership", object_id=membership.pk,
                     object_name=f"{team.name}/{username}", before={"role": membership.role}, after=None,
                     reason=reason)
        membership.delete()


TEMPLATE_NAME_MAX = 100


def job_template_save(*, user, team: Team, name: str, kind: str, fields: dict):
    """Save the submit-form values ``fields`` as template ``name`` of ``team`` (replacing one of the same
    name). Team-admins and platform admins only; audited."""
    if not can_manage_team(user, team):
        raise PermissionDenied(f"only team-admins of {team.name} may save its templates")
    name = (name or "").strip()
    if not name:
        raise ValidationError({"template_name": "name the template"})
    if len(name) > TEMPLATE_NAME_MAX:
        raise ValidationError({"template_name": f"must be at most {TEMPLATE_NAME_MAX} characters; got {len(name)}"})
    if kind not in KINDS:
        raise ValidationError({"kind": f"must be one of {', '.join(KINDS)}; got {kind!r}"})
    problems = template_value_errors(team, fields, kind)
    if problems:
        raise ValidationError({"values": "; ".join(f"{k}: {v}" for k, v in sorted(problems.items()))})
    with transaction.atomic():
        template = JobTemplate.objects.select_for_update().filter(team=team, name=name).first()
        before = {"kind": template.kind, "fields": template.fields} if template else None
        if template is None:
            template = JobTemplate(team=team, name=name, created_by=user)
        template.kind, template.fields = kind, fields
        template.save()
        audit_record(actor=user, action="job-template.create" if before is None else "job-template.update",
                     object_type="job-template", object_id=template.pk, object_name=f"{team.name}/{name}",
                     before=before, after={"kind": kind, "fields": fields})
    return template


def job_template_delete(*, user, template) -> None:
    """Delete a saved template (team-admins and platform admins only; audited)."""
    if not can_manage_team(user, template.team):
        raise PermissionDenied(f"only team-admins of {template.team.name} may delete its templates")
    with transaction.atomic():
        audit_record(actor=user, action="job-template.delete", object_type="job-template", object_id=template.pk,
                     object_name=f"{template.team.name}/{template.name}",
                     before={"kind": template.kind, "fields": template.fields}, after=None)
        template.delete()
