"""Platform administration in the portal (not only Django's /admin/): teams (the department tree), pools and
GPU models. Each change needs a reason and commits with its audit entry (before and after). Nothing here
deletes: a team, pool or model keeps its history and accounting."""

from django.core.exceptions import ValidationError
from django.db import transaction

from accounting.services_billing import rate_card_add_price
from portal.audit import audit_record
from portal.governance.services import _require_admin, _require_reason, parent_guarantee_errors
from portal.models import SsoGroupRule, Team
from scheduler.models import GpuModel, Pool
from scheduler.services.common import db_now
from scheduler.services.jobs import wake_cycle

TEAM_FIELDS = ("name", "display_name", "parent")


def _team_snapshot(team: Team) -> dict:
    return {"name": team.name, "display_name": team.display_name, "parent": team.parent.name if team.parent else None}


def team_save(*, user, values: dict, reason: str, instance: Team | None = None) -> Team:
    """Create a team or edit ``instance`` (name, display name, parent in the department tree). A move under a
    parent keeps the parent's guarantees covering its children's (as quota edits do); the tree stays a tree."""
    _require_admin(user)
    with transaction.atomic():
        team = Team() if instance is None else Team.objects.select_for_update().get(pk=instance.pk)
        before = None if instance is None else _team_snapshot(team)
        for field in TEAM_FIELDS:
            if field in values:
                setattr(team, field, values[field])
        team.full_clean()
        errors = parent_guarantee_errors(team, team.parent) if team.parent is not None else []
        if errors:
            raise ValidationError({"parent": errors})
        after = _team_snapshot(team)
        if before == after:
            return team
        _require_reason(reason)
        team.save()
        audit_record(actor=user, action="team.create" if before is None else "team.update", object_type="team",
                     object_id=team.pk, object_name=team.name, before=before, after=after, reason=reason)
    wake_cycle()  # the tree is part of every snapshot
    return team


def pool_create(*, user, name: str, description: str, teams: list[Team], reason: str) -> Pool:
    """A new pool with the teams allowed in it (nodes join it when they register with its name)."""
    _require_admin(user)
    pool = Pool(name=(name or "").strip(), description=(description or "").strip())
    pool.full_clean()
    _require_reason(reason)
    with transaction.atomic():
        pool.save()
        pool.teams.set(teams)
        audit_record(actor=user, action="pool.create", object_type="pool", object_id=pool.pk, object_name=pool.name,
                     before=None, after={"name": pool.name, "description": pool.description,
                                         "teams": sorted(t.name for t in teams)}, reason=reason)
    return pool


GPU_MODEL_FIELDS = ("name", "display_name", "vendor", "memory_mb", "is_mig_profile")


def gpu_model_create(*, user, values: dict, reason: str, price=None) -> GpuModel:
    """A new GPU model (quotas and prices attach to it; nodes report GPUs of it by name). With ``price`` (per
    GPU-hour) a new rate card version prices it from now on, keeping every other model's price."""
    _require_admin(user)
    model = GpuModel(**{f: values[f] for f in GPU_MODEL_FIELDS if f in values})
    model.full_clean()
    if price is not None and price < 0:
        raise ValidationError({"price_per_gpu_hour": "must be 0 or more"})
    _require_reason(reason)
    with transaction.atomic():
        model.save()
        audit_record(actor=user, action="gpu_model.create", object_type="gpu_model", object_id=model.pk,
                     object_name=model.name, before=None, after={f: getattr(model, f) for f in GPU_MODEL_FIELDS},
                     reason=reason)
        if price is not None:
            card = rate_card_add_price(gpu_model=model, price=price, effective_from=db_now())
            audit_record(actor=user, action="rate_card.create", object_type="rate_card", object_id=card.pk,
                         object_name=f"v{card.version}", before=None,
                         after={"version": card.version, "effective_from": card.effective_from.isoformat(),
                                "gpu_model": model.name, "price_per_gpu_hour": str(price),
                                "currency": card.currency}, reason=reason)
    return model


def sso_rule_add(*, user, group: str, team: Team | None, role: str, reason: str) -> SsoGroupRule:
    """A rule mapping an identity-provider group to a team and role (or to platform admin: no team)."""
    _require_admin(user)
    rule = SsoGroupRule(group=(group or "").strip(), team=team, role=role)
    rule.full_clean()  # names the field: a blank group, an unknown role, a team with platform-admin, a repeat
    _require_reason(reason)
    with transaction.atomic():
        rule.save()
        audit_record(actor=user, action="sso_rule.create", object_type="sso_rule", object_id=rule.pk,
                     object_name=str(rule), before=None, after=_rule_snapshot(rule), reason=reason)
    return rule


def sso_rule_delete(*, user, rule: SsoGroupRule, reason: str) -> None:
    """Remove a rule; users keep their memberships until their next sign-in."""
    _require_admin(user)
    _require_reason(reason)
    with transaction.atomic():
        audit_record(actor=user, action="sso_rule.delete", object_type="sso_rule", object_id=rule.pk,
                     object_name=str(rule), before=_rule_snapshot(rule), after=None, reason=reason)
        rule.delete()


def _rule_snapshot(rule: SsoGroupRule) -> dict:
    return {"group": rule.group, "team": rule.team.name if rule.team else None, "role": rule.role}
