"""Single sign-on with OpenID Connect (mozilla-django-oidc): users are created at their first sign-in and, at
every sign-in, their teams and roles follow the ``groups`` claim through the rules platform admins edit in
Govern -> Single sign-on (``SsoGroupRule``). Enabled when the ``OIDC_*`` settings are (see settings.py);
otherwise the backend stands aside and only local sign-in exists. ``ROTA_LOCAL_LOGIN=staff`` keeps the
password form for platform admins only (break-glass)."""

import hashlib
import logging
import re

import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import ValidationError
from django.db import transaction
from django.http import Http404
from mozilla_django_oidc import views as oidc_views
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from portal.audit import audit_record
from portal.models import Membership, SsoGroupRule, Team

logger = logging.getLogger(__name__)
_RANK = {Membership.MEMBER: 1, Membership.TEAM_ADMIN: 2}
_USERNAME = re.compile(r"[^\w.@+-]")


def sso_enabled() -> bool:
    return bool(getattr(settings, "ROTA_OIDC_ENABLED", False))


def sso_apply_groups(*, user, groups: list[str]) -> None:
    """Set ``user``'s memberships (and platform-admin flag) from ``groups`` by the rules, audited as the
    system. Teams no rule names, and memberships in them, are left alone."""
    rules = list(SsoGroupRule.objects.select_related("team"))
    wanted: dict[int, str] = {}
    staff = False
    managed = {r.team_id for r in rules if r.team_id is not None}
    for rule in rules:
        if rule.group not in groups:
            continue
        if rule.role == SsoGroupRule.PLATFORM_ADMIN:
            staff = True
        elif _RANK[rule.role] > _RANK.get(wanted.get(rule.team_id, ""), 0):
            wanted[rule.team_id] = rule.role
    with transaction.atomic():
        current = {m.team_id: m for m in Membership.objects.filter(user=user, team_id__in=managed)}
        for team_id, role in wanted.items():
            m = current.get(team_id)
            if m is not None and m.role == role:
                continue
            before = {"role": m.role} if m else None
            if m is None:
                m = Membership.objects.create(user=user, team_id=team_id, role=role)
            else:
                m.role = role
                m.save(update_fields=["role"])
            audit_record(actor=None, action="membership.create" if before is None else "membership.update",
                         object_type="membership", object_id=m.pk,
                         object_name=f"{Team.objects.get(pk=team_id).name}/{user.username}", before=before,
                         after={"role": role}, reason="single sign-on groups")
        for team_id, m in current.items():
            if team_id not in wanted:
                audit_record(actor=None, action="membership.delete", object_type="membership", object_id=m.pk,
                             object_name=f"{m.team.name}/{user.username}", before={"role": m.role}, after=None,
                             reason="single sign-on groups: no rule gives this team any more")
                m.delete()
        if user.is_staff != staff and (staff or _sso_staff(user)):
            audit_record(actor=None, action="user.update", object_type="user", object_id=user.pk,
                         object_name=user.username, before={"is_staff": user.is_staff}, after={"is_staff": staff},
                         reason="single sign-on groups")
            user.is_staff = staff
            user.save(update_fields=["is_staff"])


def _sso_staff(user) -> bool:
    """Whether ``user`` is a platform admin by single sign-on (so it may take it away): a user with a usable
    local password is a break-glass admin, whose flag only a platform admin changes."""
    return not user.has_usable_password()


class RotaOIDCBackend(OIDCAuthenticationBackend):
    """mozilla-django-oidc's backend, standing aside while SSO is not configured; users are found by the
    identity provider's email and named by ``preferred_username``; groups apply at every sign-in."""

    def __init__(self, *args, **kwargs):
        self.enabled = sso_enabled()
        if self.enabled:
            super().__init__(*args, **kwargs)

    def authenticate(self, request, **kwargs):
        if not self.enabled:
            return None
        try:
            return super().authenticate(request, **kwargs)
        except requests.RequestException as exc:  # a code the provider refuses, or the provider unreachable
            logger.warning("single sign-on failed: %s", exc)
            return None  # the callback sends the person back to the sign-in page, saying so

    def get_user(self, user_id):
        return super().get_user(user_id) if self.enabled else None

    def get_username(self, claims) -> str:
        name = _USERNAME.sub("-", str(claims.get("preferred_username") or claims.get("email", "").split("@")[0]))
        name = name[:120] or "user"
        if get_user_model().objects.filter(username=name).exists():
            name = f"{name}-{hashlib.sha256(str(claims.get('sub', '')).encode()).hexdigest()[:8]}"
        return name

    def create_user(self, claims):
        user = get_user_model().objects.create_user(self.get_username(claims), email=claims.get("email", ""))
        user.set_unusable_password()
        user.first_name = str(claims.get("name", ""))[:150]
        user.save()
        audit_record(actor=None, action="user.create", object_type="user", object_id=user.pk, object_name=user.username,
                     before=None, after={"email": user.email}, reason="first single sign-on")
        sso_apply_groups(user=user, groups=_groups(claims))
        return user

    def update_user(self, user, claims):
        sso_apply_groups(user=user, groups=_groups(claims))
        return user


def _groups(claims) -> list[str]:
    groups = claims.get("groups") or []
    return [str(g) for g in groups] if isinstance(groups, list) else []


class LocalLoginForm(AuthenticationForm):
    """The password form; with ``ROTA_LOCAL_LOGIN=staff`` it admits platform admins only (break-glass)."""

    def confirm_login_allowed(self, user):
        super().confirm_login_allowed(user)
        if getattr(settings, "ROTA_LOCAL_LOGIN", "all") == "staff" and not user.is_staff:
            raise ValidationError("Sign in with single sign-on: local passwords are for platform admins only.",
                                  code="sso_only")


class LoginView(auth_views.LoginView):
    """The sign-in page: the single sign-on button when SSO is on, and the local password form."""

    authentication_form = LocalLoginForm

    def get_context_data(self, **kwargs):
        return {**super().get_context_data(**kwargs), "sso_enabled": sso_enabled(),
                "local_login_staff_only": getattr(settings, "ROTA_LOCAL_LOGIN", "all") == "staff"}


class _WhileEnabled:
    """A mozilla-django-oidc view that is a 404 while single sign-on is off."""

    def dispatch(self, request, *args, **kwargs):
        if not sso_enabled():
            raise Http404("Single sign-on is not configured")
        return super().dispatch(request, *args, **kwargs)


class SsoStartView(_WhileEnabled, oidc_views.OIDCAuthenticationRequestView):
    """To the identity provider's sign-in (state and nonce kept in the session)."""


class SsoCallbackView(_WhileEnabled, oidc_views.OIDCAuthenticationCallbackView):
    """Back from the identity provider: the code is exchanged and the person signed in (or sent back)."""
