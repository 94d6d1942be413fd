"""Creating and revoking the API keys of an inference service (the gateway's credential). Only members of the
service's team may; to anyone else the team does not exist (404)."""

from django.core.exceptions import ValidationError
from django.http import Http404

from portal.access import submit_teams_for
from portal.models import Team, slug_validator
from scheduler.models import ServiceKey
from scheduler.services.common import db_now

MAX_KEYS_PER_SERVICE = 20


def team_of_member(user, team_name: str) -> Team:
    """``team_name`` when ``user`` is one of its members, else 404 (an outsider learns nothing)."""
    team = submit_teams_for(user).filter(name=team_name).first()
    if team is None:
        raise Http404("No such team.")
    return team


def service_keys(team: Team, service: str):
    """The service's keys, newest first, revoked ones included (their ``revoked_at`` says so)."""
    return ServiceKey.objects.filter(team=team, service=service)


def service_key_create(*, user, team: Team, service: str) -> tuple[ServiceKey, str]:
    """A new key for ``team``'s ``service``: the row and the raw key, shown this once."""
    try:
        slug_validator(service)
    except ValidationError as exc:
        raise ValidationError({"service": exc.messages}) from None
    if len(service) > 100:
        raise ValidationError({"service": ["at most 100 characters"]})
    live = service_keys(team, service).filter(revoked_at__isnull=True).count()
    if live >= MAX_KEYS_PER_SERVICE:
        raise ValidationError({"service": [f"{service} already has {MAX_KEYS_PER_SERVICE} keys (the limit): "
                                           "revoke one first"]})
    return ServiceKey.issue(team, service, user)


def service_key_revoke(*, team: Team, service: str, key_id: int) -> ServiceKey:
    """Revoke one key of the service at once (revoking it again changes nothing)."""
    key = service_keys(team, service).filter(pk=key_id).first()
    if key is None:
        raise Http404("No such key.")
    if key.revoked_at is None:
        key.revoked_at = db_now()
        key.save(update_fields=["revoked_at"])
    return key
