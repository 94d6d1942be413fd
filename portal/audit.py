"""The audit log of governance changes. ``audit_record`` is the only writer of AuditEntry rows; call it
inside the transaction that makes the change, so the change and its record commit or fail together."""

from decimal import Decimal
from typing import Any

from django.db.models import QuerySet

from portal.models import AuditEntry


def _jsonable(value: Any) -> Any:
    """Decimals as strings (exact), datetimes as ISO strings, containers recursively."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [_jsonable(v) for v in value]
    if isinstance(value, Decimal):
        return format(value.normalize(), "f") if value == value.to_integral() else str(value)
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def audit_record(
    *,
    actor,
    action: str,
    object_type: str,
    object_id: Any = "",
    object_name: str = "",
    before: dict | None = None,
    after: dict | None = None,
    reason: str = "",
) -> AuditEntry:
    """Record one governance change made by ``actor`` (a user, or None for the system)."""
    return AuditEntry.objects.create(
        actor=actor if getattr(actor, "pk", None) else None,
        actor_name=getattr(actor, "username", "") or "system",
        action=action,
        object_type=object_type,
        object_id=str(object_id)[:64],
        object_name=str(object_name)[:200],
        before=_jsonable(before) if before is not None else None,
        after=_jsonable(after) if after is not None else None,
        reason=(reason or "").strip()[:500],
    )


def audit_entries(*, object_type: str = "", actor: str = "") -> QuerySet[AuditEntry]:
    """Audit entries, newest first, optionally only of one object type and/or one actor (username)."""
    qs = AuditEntry.objects.select_related("actor")
    if object_type:
        qs = qs.filter(object_type=object_type)
    if actor:
        qs = qs.filter(actor_name=actor)
    return qs
