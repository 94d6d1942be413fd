"""Scheduling policies as configuration (platform admins only): create a named policy, tune it (each edit an
immutable new version), activate a version for the live cycle. Every change commits with its audit entry.

The rules a policy's knobs obey live here, in ``policy_validate``: each refusal names the knob and its limit."""

import math
import re

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from portal import locks
from portal.access import is_platform_admin
from portal.audit import audit_record
from scheduler.models import PolicyActivation, PolicyVersion, SchedulingPolicy
from scheduler.models.policies import KNOBS, ORDERINGS, PLACEMENTS, PREEMPTION_SCOPES
from scheduler.services.common import db_now
from scheduler.services.jobs import wake_cycle

HALF_LIFE_MIN_S = 60.0  # a minute: shorter forgets usage between two cycles
HALF_LIFE_MAX_S = 365 * 24 * 3600.0  # a year
MAX_LAS_THRESHOLDS = 8
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")
RESERVED_NAMES = ("active",)  # /api/v1/policies/active/ is the active policy
BOOLEAN_KNOBS = ("backfill", "preemption", "borrowing", "guarantee_first", "reclaim")


def _require_admin(user) -> None:
    if not is_platform_admin(user):
        raise PermissionDenied("only platform admins may change scheduling policies")


def _require_reason(reason: str) -> str:
    reason = (reason or "").strip()
    if not reason:
        raise ValidationError({"reason": "a reason is required: it is kept in the audit log"})
    return reason[:500]


def thresholds_parse(text: str) -> list[float]:
    """LAS thresholds as an admin types them: GPU-seconds separated by commas or spaces. Raises
    ValidationError (``las_thresholds_gpu_s``) naming an entry that is not a number."""
    values = []
    for entry in re.split(r"[,\s]+", (text or "").strip()):
        if not entry:
            continue
        try:
            values.append(float(entry))
        except ValueError:
            raise ValidationError({"las_thresholds_gpu_s": f"{entry!r} is not a number of GPU-seconds"}) from None
    return values


def policy_validate(values: dict) -> dict:
    """The knob values of a version, checked and normalised; raise ValidationError naming each bad knob and its
    limit. Every knob must be given (a version is complete: nothing falls back to a default silently)."""
    errors: dict[str, str] = {}
    missing = [k for k in KNOBS if k not in values]
    unknown = sorted(set(values) - set(KNOBS))
    if missing:
        errors["__all__"] = f"every knob must be given; missing: {', '.join(missing)}"
    if unknown:
        errors["__all__"] = f"unknown knobs {', '.join(unknown)}; allowed: {', '.join(KNOBS)}"
    if errors:
        raise ValidationError(errors)
    clean = dict(values)
    for key, allowed in (("ordering", ORDERINGS), ("placement", PLACEMENTS), ("preemption_scope", PREEMPTION_SCOPES)):
        if clean[key] not in allowed:
            errors[key] = f"must be one of {', '.join(allowed)}; got {clean[key]!r}"
    for key in BOOLEAN_KNOBS:
        if not isinstance(clean[key], bool):
            errors[key] = f"must be true or false; got {clean[key]!r}"
    half_life = clean["fair_share_half_life_s"]
    if isinstance(half_life, bool) or not isinstance(half_life, int | float) or not math.isfinite(half_life):
        errors["fair_share_half_life_s"] = f"must be a number of seconds; got {half_life!r}"
    elif not HALF_LIFE_MIN_S <= half_life <= HALF_LIFE_MAX_S:
        errors["fair_share_half_life_s"] = (f"must be from {HALF_LIFE_MIN_S:g} s (a minute) to {HALF_LIFE_MAX_S:g} s "
                                            f"(a year); got {half_life:g}")
    else:
        clean["fair_share_half_life_s"] = float(half_life)
    thresholds = clean["las_thresholds_gpu_s"]
    if isinstance(thresholds, str):
        thresholds = thresholds_parse(thresholds)
    problem = _thresholds_problem(thresholds, clean["ordering"])
    if problem:
        errors["las_thresholds_gpu_s"] = problem
    else:
        clean["las_thresholds_gpu_s"] = [float(t) for t in thresholds]
    if clean["reclaim"] is True and clean["preemption"] is False:
        errors["reclaim"] = "reclaim takes borrowed GPUs back by preemption: turn preemption on, or reclaim off"
    if clean["preemption_scope"] == "cluster" and clean["preemption"] is False:
        errors["preemption_scope"] = "a preemption scope needs preemption on: leave it at team"
    if errors:
        raise ValidationError(errors)
    return clean


def _thresholds_problem(thresholds, ordering: str) -> str:
    if not isinstance(thresholds, list | tuple) or any(
            isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t) for t in thresholds):
        return "must be a list of GPU-second numbers"
    if thresholds and ordering != "las":
        return "service-level thresholds are used by ordering las only: leave them empty"
    if len(thresholds) > MAX_LAS_THRESHOLDS:
        return f"at most {MAX_LAS_THRESHOLDS} thresholds; got {len(thresholds)}"
    if any(t <= 0 for t in thresholds):
        return "each threshold must be above 0 GPU-seconds"
    if any(b <= a for a, b in zip(thresholds, thresholds[1:], strict=False)):
        return f"thresholds must be strictly ascending; got {', '.join(f'{t:g}' for t in thresholds)}"
    return ""


def policy_create(*, user, name: str, description: str = "", values: dict, reason: str) -> PolicyVersion:
    """A new named policy with its version 1 (not active: activate it with ``policy_activate``)."""
    _require_admin(user)
    name = (name or "").strip()
    errors = {}
    if not NAME_RE.match(name) or name in RESERVED_NAMES:
        errors["name"] = ("must be 1 to 40 lower-case letters, digits or hyphens, starting with a letter or digit, "
                          f"and not {', '.join(RESERVED_NAMES)}")
    elif SchedulingPolicy.objects.filter(name=name).exists():
        errors["name"] = f"a policy named {name} already exists: edit it to record a new version"
    try:
        clean = policy_validate(values)
    except ValidationError as exc:
        errors |= {k: " ".join(v) for k, v in exc.message_dict.items()}
    try:
        reason = _require_reason(reason)
    except ValidationError as exc:
        errors |= {k: " ".join(v) for k, v in exc.message_dict.items()}
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        policy = SchedulingPolicy.objects.create(name=name, description=(description or "").strip()[:300],
                                                 created_by=user)
        version = PolicyVersion.objects.create(policy=policy, number=1, created_by=user, reason=reason, **clean)
        audit_record(actor=user, action="policy.create", object_type="policy", object_id=policy.pk,
                     object_name=policy.name, before=None, after={"version": 1, **version.knobs()}, reason=reason)
    return version


def policy_version_create(*, user, policy: SchedulingPolicy, values: dict, reason: str) -> PolicyVersion:
    """Record an edit of ``policy`` as its next version. When the policy is the active one, the new version is
    activated at once (the next cycle schedules with it). An edit that changes nothing is refused."""
    _require_admin(user)
    clean = policy_validate(values)
    reason = _require_reason(reason)
    with transaction.atomic():
        policy = SchedulingPolicy.objects.select_for_update().get(pk=policy.pk)
        current = policy.versions.order_by("-number").first()
        before = current.knobs() if current else {}
        after = {k: clean[k] for k in KNOBS}
        if before == after:
            raise ValidationError({"__all__": f"nothing changed: {current.label} already has these values"})
        version = PolicyVersion.objects.create(policy=policy, number=(current.number if current else 0) + 1,
                                               created_by=user, reason=reason, **clean)
        changed = [k for k in KNOBS if before.get(k) != after[k]]
        audit_record(actor=user, action="policy.version", object_type="policy", object_id=policy.pk,
                     object_name=policy.name, before={"version": current.number, **{k: before[k] for k in changed}},
                     after={"version": version.number, **{k: after[k] for k in changed}}, reason=reason)
        locks.xact_lock(locks.SCHEDULING_CYCLE)  # see _activate; read the active version under the lock
        active = _active_version()
        if active is not None and active.policy_id == policy.pk:
            _activate(user=user, version=version, previous=active, reason=reason)
    return version


def policy_activate(*, user, version: PolicyVersion, reason: str) -> PolicyActivation | None:
    """Make ``version`` the one the live cycle schedules with, from now on (None when it already is)."""
    _require_admin(user)
    reason = _require_reason(reason)
    with transaction.atomic():
        locks.xact_lock(locks.SCHEDULING_CYCLE)  # see _activate; read the active version under the lock
        previous = _active_version()
        if previous is not None and previous.pk == version.pk:
            return None
        return _activate(user=user, version=version, previous=previous, reason=reason)


def _active_version() -> PolicyVersion | None:
    activation = PolicyActivation.objects.select_related("version__policy").order_by("-at", "-id").first()
    return activation.version if activation else None


def _activate(*, user, version: PolicyVersion, previous: PolicyVersion | None, reason: str) -> PolicyActivation:
    """Record the activation; the caller holds the scheduling cycle's lock (``locks.xact_lock``): it waits for a
    running cycle and keeps the next one out until this commits, so the version active at a decision's time
    (taken after the lock) is exactly the version that made it (``selectors_policies.policy_versions_at``)."""
    activation = PolicyActivation.objects.create(version=version, at=db_now(), actor=user, reason=reason)
    audit_record(actor=user, action="policy.activate", object_type="policy", object_id=version.policy_id,
                 object_name=version.policy.name, before={"active": previous.label if previous else None},
                 after={"active": version.label}, reason=reason)
    wake_cycle()
    return activation
