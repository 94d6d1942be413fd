"""CSV import of users and memberships (Govern -> Teams): a dry run shows, line by line, what would change;
the import applies the same plan in one transaction, each change audited. Columns: ``username, email, team,
role`` (role ``member`` or ``team-admin``). It adds users (with no local password: they sign in through
single sign-on) and memberships and changes roles; it never removes anyone. One bad line and nothing is
applied."""

import csv
import io
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction

from portal.audit import audit_record
from portal.governance.services import _require_admin, _require_reason
from portal.models import Membership, Team

COLUMNS = ("username", "email", "team", "role")
MAX_ROWS = 5000
MAX_BYTES = 1_000_000
ROLES = (Membership.MEMBER, Membership.TEAM_ADMIN)


@dataclass
class ImportLine:
    """One line of the file and what importing it does (``change``), or why it cannot (``error``)."""

    line: int
    username: str
    email: str
    team: str
    role: str
    change: str = ""
    error: str = ""


def _parse(text: str) -> tuple[list[ImportLine], str]:
    if len(text.encode()) > MAX_BYTES:
        return [], f"the file is larger than {MAX_BYTES // 1000} kB; split it"
    reader = csv.reader(io.StringIO(text.lstrip("\ufeff")))
    header = [h.strip().lower() for h in next(reader, [])]
    if tuple(header) != COLUMNS:
        return [], f"the first line must be the header {','.join(COLUMNS)}; got {','.join(header)[:100]!r}"
    lines = []
    for number, row in enumerate(reader, start=2):
        if not any(cell.strip() for cell in row):
            continue
        if len(lines) >= MAX_ROWS:
            return [], f"at most {MAX_ROWS} lines a file; split it"
        cells = [c.strip() for c in row] + [""] * (len(COLUMNS) - len(row))
        lines.append(ImportLine(number, *cells[:4]))
        if len(row) != len(COLUMNS):
            lines[-1].error = f"expected {len(COLUMNS)} columns ({', '.join(COLUMNS)}); got {len(row)}"
    return lines, ""


def members_import_plan(text: str) -> tuple[list[ImportLine], str]:
    """Parse ``text`` and say per line what importing it would change; ``(lines, file_error)``."""
    lines, problem = _parse(text)
    if problem:
        return [], problem
    users = {u.username: u for u in get_user_model().objects.filter(username__in={x.username for x in lines})}
    teams = {t.name: t for t in Team.objects.filter(name__in={x.team for x in lines})}
    roles = {(m.user.username, m.team.name): m.role for m in Membership.objects.filter(
        user__username__in=users, team__name__in=teams).select_related("user", "team")}
    seen: dict[tuple[str, str], int] = {}
    new_users: dict[str, str] = {}
    validate_username = UnicodeUsernameValidator()
    for x in lines:
        if x.error:
            continue
        problems = []
        try:
            validate_username(x.username)
        except ValidationError:
            problems.append(f"username {x.username[:40]!r} must be letters, digits and @.+-_")
        if x.team not in teams:
            problems.append(f"no team named {x.team[:40]!r}")
        if x.role not in ROLES:
            problems.append(f"role must be {' or '.join(ROLES)}; got {x.role[:20]!r}")
        if x.username not in users:
            try:
                validate_email(x.email)
            except ValidationError:
                problems.append(f"a new user needs an email; got {x.email[:60]!r}")
        key = (x.username, x.team)
        if key in seen:
            problems.append(f"{x.username} in {x.team} is already on line {seen[key]}")
        seen.setdefault(key, x.line)
        if problems:
            x.error = "; ".join(problems)
            continue
        parts = []
        if x.username not in users and x.username not in new_users:
            new_users[x.username] = x.email
            parts.append("new user")
        current = roles.get(key)
        if current is None:
            parts.append(f"joins {x.team} as {x.role}")
        elif current != x.role:
            parts.append(f"{current} -> {x.role} in {x.team}")
        x.change = ", ".join(parts) or "unchanged"
    return lines, ""


def members_import(*, user, text: str, reason: str) -> list[ImportLine]:
    """Apply the plan of ``text`` (see ``members_import_plan``) in one transaction; ValidationError (and
    nothing applied) when the file or any line is bad."""
    _require_admin(user)
    lines, problem = members_import_plan(text)
    if problem:
        raise ValidationError({"file": problem})
    bad = [f"line {x.line}: {x.error}" for x in lines if x.error]
    if bad:
        raise ValidationError({"file": bad[:20] + ([f"and {len(bad) - 20} more"] if len(bad) > 20 else [])})
    _require_reason(reason)
    User = get_user_model()
    with transaction.atomic():
        for x in lines:
            if x.change == "unchanged":
                continue
            person = User.objects.filter(username=x.username).first()
            if person is None:
                person = User.objects.create_user(x.username, email=x.email)
                person.set_unusable_password()
                person.save(update_fields=["password"])
                audit_record(actor=user, action="user.create", object_type="user", object_id=person.pk,
                             object_name=person.username, before=None, after={"email": person.email},
                             reason=reason)
            team = Team.objects.get(name=x.team)
            membership = Membership.objects.filter(user=person, team=team).first()
            if membership is not None and membership.role == x.role:
                continue
            before = {"role": membership.role} if membership else None
            if membership is None:
                membership = Membership.objects.create(user=person, team=team, role=x.role)
            else:
                membership.role = x.role
                membership.save(update_fields=["role"])
            audit_record(actor=user, action="membership.create" if before is None else "membership.update",
                         object_type="membership", object_id=membership.pk,
                         object_name=f"{team.name}/{person.username}", before=before, after={"role": x.role},
                         reason=reason)
    return lines
