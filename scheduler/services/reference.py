"""The reference rows a submit looks up, remembered per process until any of them changes: GPU models, priority
classes (with the teams granted a restricted one), pools (with their teams), the kinds' default images, the
teams each user may submit for and what each team's spent budget does at submit; and the API tokens with their
users (``api_token``), so a token's request reads one trivial query before its view, and a submit two in all.

PostgreSQL says when they change: a trigger on each of their tables (migration ``scheduler.0021``) sets the one
row of ``rota_reference_version`` to a fresh number in the writer's transaction, whatever writes (an admin's
form, a service, ``QuerySet.update``, SQL by hand). Each lookup first reads that number (one trivial query
instead of six lookups) and keeps what this process remembered only while it is the same; so a change, a
member removed included, takes effect at the first lookup after its commit. The number is read before the rows
it labels, so what is remembered under a number is never older than it.

What is handed out is shared by every thread of the process: read it, never change it (a token's user is the
exception: built afresh for each request, from values only)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from django.contrib.auth import get_user_model
from django.db import DEFAULT_DB_ALIAS, connection
from rest_framework.authtoken.models import Token

from accounting.budgets import budget_action
from portal.access import submit_teams_for
from portal.models import Team
from scheduler.models import GpuModel, Pool, PriorityClass
from scheduler.services import runtime

MAX_ENTRIES = 10_000  # per-user entries besides the tables; past it, everything is read again

_lock = threading.Lock()
_memo: tuple[int | None, dict[Any, Any]] = (None, {})


VERSION_SQL = "SELECT n FROM rota_reference_version"


def version() -> int:
    """The reference version now (PostgreSQL's, as this connection sees it)."""
    with connection.cursor() as cursor:
        cursor.execute(VERSION_SQL)
        return cursor.fetchone()[0]


def now() -> Reference:
    """The reference rows as of now: one query, then what this process remembered at this version."""
    return at(version())


def at(current: int) -> Reference:
    """The reference rows at version ``current``, read by the caller (``version()``, or a column of a query it
    makes anyway: ``scheduler.api.node.NodeTokenAuthentication``) before any row it labels."""
    global _memo
    with _lock:
        seen, entries = _memo
        if seen != current or len(entries) > MAX_ENTRIES:
            entries = {}
            _memo = (current, entries)
    return Reference(entries)


def of_request(request) -> Reference:
    """The reference rows as the request's token authentication read them (``portal.api.TokenAuthentication``:
    one version read serves the token and the view), else as of now. Only for a view that writes none of them
    before its lookups."""
    return getattr(request, "reference", None) or now()


class Reference:
    """The lookups, each read from the database once per reference version (see ``now``)."""

    def __init__(self, entries: dict) -> None:
        self._entries = entries  # shared by every Reference of the same version

    def _remembered(self, key, load: Callable[[], Any]) -> Any:
        try:
            return self._entries[key]
        except KeyError:  # two threads may both load it: both answers are as new as the version
            value = self._entries[key] = load()
            return value

    def gpu_models(self) -> dict[str, GpuModel]:
        """Every GPU model by name."""
        return self._remembered("gpu_models", lambda: {m.name: m for m in GpuModel.objects.all()})

    def priority_classes(self) -> dict[str, PriorityClass]:
        """Every priority class by name, its granted teams read (``usable_by`` asks no query)."""
        return self._remembered("priority_classes",
                                lambda: {c.name: c for c in PriorityClass.objects.prefetch_related("teams")})

    def pools(self) -> dict[str, Pool]:
        """Every pool by name, with the ids of the teams that may use it (``team_ids``)."""

        def load():
            out = {p.name: p for p in Pool.objects.prefetch_related("teams")}
            for pool in out.values():
                pool.team_ids = frozenset(t.pk for t in pool.teams.all())
            return out

        return self._remembered("pools", load)

    def team_pools(self, team: Team) -> list[Pool]:
        """The pools ``team`` may use, by name."""
        return [p for p in self.pools().values() if team.pk in p.team_ids]

    def kind_images(self) -> dict[str, str]:
        """The default image of each kind (``scheduler.services.runtime.kind_images``)."""
        return self._remembered("kind_images", runtime.kind_images)

    def submit_teams(self, user) -> list[Team]:
        """The teams ``user`` may submit for (``portal.access.submit_teams_for``), by id."""
        if not user.is_authenticated:
            return []
        return self._remembered(("submit_teams", user.pk), lambda: list(submit_teams_for(user).order_by("pk")))

    def budget_action(self, team: Team) -> tuple[str, str] | None:
        """What ``team``'s spent budget does at submit (``accounting.budgets.budget_action``). The budgets' refresh
        (``accounting.usage_rollup``, each minute) moves the version too: one more read per minute."""
        return self._remembered(("budget_action", team.pk), lambda: budget_action(team))

    def api_token(self, key: str) -> tuple[Any, Token] | None:
        """The user of API token ``key`` and the token (None: no such token), each a new object for the caller
        alone, built from the values read at this version. A token deleted or regenerated, its user changed or
        deleted moves the version (migration ``scheduler.0023``); a login's ``last_login`` alone does not. Keys
        no token has are not remembered: they are read each time, as before."""
        user_model = get_user_model()
        names = [f.attname for f in user_model._meta.concrete_fields]
        row = self._entries.get(("api_token", key))
        if row is None:
            row = Token.objects.filter(key=key).values_list("created", *(f"user__{n}" for n in names)).first()
            if row is None:
                return None
            self._entries[("api_token", key)] = row
        user = user_model.from_db(DEFAULT_DB_ALIAS, names, row[1:])
        token = Token.from_db(DEFAULT_DB_ALIAS, ["key", "user_id", "created"], [key, user.pk, row[0]])
        token.user = user
        return user, token
