"""Governance writes: quotas, priority classes, pool membership, node state, budgets. Each change and its audit entry
commit in one transaction. Only platform admins may call these; views and APIs check that first, and the
services check it again (failing closed)."""

from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from accounting.budgets import budgets_refresh
from accounting.models import Budget
from portal.access import is_platform_admin
from portal.audit import audit_record
from portal.models import Team
from scheduler.kinds import KINDS
from scheduler.models import GpuModel, Job, Node, Pool, PriorityClass, Quota
from scheduler.models.jobs import WAITING_STATES
from scheduler.services.common import db_now
from scheduler.services.jobs import job_hold, job_release, wake_cycle
from scheduler.services.nodes import NodeProtocolError, node_set_state

# The bounds keep every value inside its column: guaranteed and limit are numeric(9, 3) (below 10^6), weight is
# numeric(7, 3) (below 10^4). Values are kept to QUOTA_STEP; finer ones are refused, never rounded silently.
MAX_GPUS = Decimal(100000)
MAX_WEIGHT = Decimal(10000)
QUOTA_STEP = Decimal("0.001")
QUOTA_FIELDS = ("guaranteed", "limit", "weight")
QUOTA_DEFAULTS = {"guaranteed": Decimal(0), "limit": None, "weight": Decimal(1)}
REASON_REQUIRED = "a reason is required: say why (it is kept in the audit log)"
MAX_REASON = 500  # AuditEntry.reason


class StaleEdit(Exception):
    """Someone else changed what the caller edited since the caller read it; ``cells`` names the cells."""

    def __init__(self, cells: list[str]):
        super().__init__(
            f"changed by someone else since you opened it: {', '.join(cells)}. Reload to see the current "
            "values, then apply your change again."
        )
        self.cells = cells


@dataclass(frozen=True)
class QuotaChange:
    """The wanted values of one cell of the quota matrix (team × GPU model, all pools). ``updated_at`` is the
    row's ``updated_at`` when the editor read it (None: the editor saw no row)."""

    team: str
    gpu_model: str
    guaranteed: Decimal
    limit: Decimal | None
    weight: Decimal
    updated_at: datetime | None = None

    @property
    def cell(self) -> str:
        return f"{self.team}/{self.gpu_model}"


def _require_admin(user) -> None:
    if not is_platform_admin(user):
        raise PermissionDenied("only platform admins may change governance settings")


def reason_errors(reason: str | None) -> dict[str, str]:
    """``{"reason": …}`` when ``reason`` is blank: changes that land in the audit log must say why."""
    reason = (reason or "").strip()
    if not reason:
        return {"reason": REASON_REQUIRED}
    if len(reason) > MAX_REASON:
        return {"reason": f"at most {MAX_REASON} characters (this one has {len(reason)})"}
    return {}


def _require_reason(reason: str | None) -> None:
    """Raise ValidationError (``reason``) when ``reason`` is blank (see reason_errors)."""
    errors = reason_errors(reason)
    if errors:
        raise ValidationError(errors)


def quota_snapshot(quota: Quota | None) -> dict | None:
    if quota is None:
        return None
    return {"team": quota.team.name, "gpu_model": quota.gpu_model.name, "guaranteed": quota.guaranteed,
            "limit": quota.limit, "weight": quota.weight}


def _shown(value: Decimal) -> str:
    """A quota value as people write it (2, 2.5; not 2.500 or 2E+1); absurdly long ones cut short."""
    text = format(value.normalize(), "f") if -12 < value.adjusted() < 21 else str(value)
    return text if len(text) <= 24 else text[:20] + "…"


def quota_value_error(cell: str, field: str, value: Decimal) -> str | None:
    """Why ``value`` cannot be ``field`` of ``cell`` (None: it can): out of bounds, or finer than QUOTA_STEP."""
    if field == "weight":
        if not Decimal(0) < value < MAX_WEIGHT:
            return f"{cell}: weight must be above 0 and below {MAX_WEIGHT}; got {_shown(value)}"
    elif not Decimal(0) <= value <= MAX_GPUS:
        return f"{cell}: {field} must be between 0 and {MAX_GPUS}; got {_shown(value)}"
    if value != value.quantize(QUOTA_STEP):  # within bounds, so quantize cannot overflow
        return (f"{cell}: {field} {_shown(value)} has more than 3 decimal places; quotas are kept to "
                f"{QUOTA_STEP}, so give at most 3")
    return None


def quota_value_parse(raw, *, cell: str, field: str) -> tuple[Decimal | None, str | None]:
    """One field of a quota cell as an editor gave it: text from the quota page, a JSON number or string from
    the API. Blank or None is the field's default (guaranteed 0, limit no cap, weight 1). Returns
    ``(value, None)``, or ``(None, why)`` naming the cell and the bounds."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return QUOTA_DEFAULTS[field], None
    value = None
    if isinstance(raw, str | int | float | Decimal) and not isinstance(raw, bool) and len(str(raw)) <= 100:
        try:
            value = Decimal(str(raw).strip())
        except InvalidOperation:
            value = None
    if value is None or not value.is_finite():
        return None, f"{cell}: {field} must be a number; got {str(raw)[:20]!r}"
    error = quota_value_error(cell, field, value)
    if error:
        return None, error
    return value.quantize(QUOTA_STEP) + 0, None  # + 0: no negative zero


def _repeated_cells(cells: list[str]) -> dict[str, str]:
    # A cell given twice: which values were meant is anyone's guess, so refuse rather than let the last win.
    return {f"{cell}.cell": f"{cell} appears {n} times; give each team × GPU model cell once"
            for cell, n in Counter(cells).items() if n > 1}


def quota_changes_parse(items: list[dict]) -> tuple[list[QuotaChange], dict[str, str]]:
    """QuotaChanges from an editor's input (the quota page, the API): dicts with ``team``, ``gpu_model``, the
    raw ``guaranteed``, ``limit`` and ``weight`` (see quota_value_parse) and ``updated_at``. Returns the
    changes and every error at once, keyed ``team/gpu_model.field`` and judged as quota_validate judges; a
    cell with an error in any of its fields gives no change."""
    repeated = _repeated_cells([f"{item['team']}/{item['gpu_model']}" for item in items])
    if repeated:
        return [], repeated
    changes, errors, unsettled = [], {}, set()
    for item in items:
        cell = f"{item['team']}/{item['gpu_model']}"
        values = {}
        for field in QUOTA_FIELDS:
            value, error = quota_value_parse(item.get(field), cell=cell, field=field)
            if error:
                errors[f"{cell}.{field}"] = error
            else:
                values[field] = value
        if len(values) == len(QUOTA_FIELDS):
            changes.append(QuotaChange(team=item["team"], gpu_model=item["gpu_model"],
                                       updated_at=item.get("updated_at"), **values))
        else:
            unsettled.add((item["team"], item["gpu_model"]))
    return changes, errors | _quota_rules(changes, unsettled=unsettled)


def quota_validate(changes: list[QuotaChange]) -> dict[str, str]:
    """Every error of a set of changes at once, keyed ``team/gpu_model.field``, judged together with the
    quotas that stay as they are: each cell at most once, each value within its bounds and to 3 decimals,
    limit ≥ guaranteed, and each parent's guarantee covers its children's."""
    repeated = _repeated_cells([ch.cell for ch in changes])
    if repeated:
        return repeated
    errors: dict[str, str] = {}
    settled, unsettled = [], set()
    for ch in changes:
        bad = {f"{ch.cell}.{f}": quota_value_error(ch.cell, f, getattr(ch, f)) for f in QUOTA_FIELDS
               if getattr(ch, f) is not None}
        bad = {key: error for key, error in bad.items() if error}
        if bad:
            errors |= bad
            unsettled.add((ch.team, ch.gpu_model))
        else:
            settled.append(ch)
    return errors | _quota_rules(settled, unsettled=unsettled)


def _quota_rules(changes: list[QuotaChange], *, unsettled: set[tuple[str, str]]) -> dict[str, str]:
    """The rules between values, for changes whose own values are each valid. ``unsettled`` names the other
    edited cells ((team, model): values refused), whose names are still checked but whose values are unknown,
    so no sum involving them is judged."""
    errors: dict[str, str] = {}
    teams = {t.name: t for t in Team.objects.all()}
    models_ = {m.name: m for m in GpuModel.objects.all()}
    for team, model in sorted(unsettled | {(ch.team, ch.gpu_model) for ch in changes}):
        if team not in teams:
            errors[f"{team}/{model}.team"] = f"no team named {team!r}"
        elif model not in models_:
            errors[f"{team}/{model}.gpu_model"] = f"no GPU model named {model!r}"
    changes = [ch for ch in changes if f"{ch.cell}.team" not in errors and f"{ch.cell}.gpu_model" not in errors]
    # The guarantees as they stand: (team, model) -> guaranteed.
    current = {
        (q.team.name, q.gpu_model.name): q.guaranteed
        for q in Quota.objects.filter(pool__isnull=True).select_related("team", "gpu_model")
    }
    for ch in changes:
        if ch.limit is None or ch.limit >= ch.guaranteed:
            continue
        g, lim = _shown(ch.guaranteed), _shown(ch.limit)
        # Outline what the editor changed: a raised guarantee is the culprit, not the limit it now exceeds.
        if ch.guaranteed != current.get((ch.team, ch.gpu_model), Decimal(0)):
            errors[f"{ch.cell}.guaranteed"] = (
                f"{ch.cell}: guaranteed {g} is above the limit {lim}; a guarantee must be ≤ the limit")
        else:
            errors[f"{ch.cell}.limit"] = (
                f"{ch.cell}: limit {lim} is below the guaranteed {g}; a limit must be ≥ the guarantee")
    # The guarantees after the change. A refused value is unknown: it is left out of every sum, so a sum of
    # children is then a lower bound (guarantees are ≥ 0) and an overflow it shows is certain.
    wanted = current | {(ch.team, ch.gpu_model): ch.guaranteed for ch in changes}
    for key in unsettled:
        wanted.pop(key, None)
    by_id = {t.pk: t for t in teams.values()}

    def parent_of(team_name: str) -> str | None:
        parent_id = teams[team_name].parent_id if team_name in teams else None
        return by_id[parent_id].name if parent_id else None

    children: dict[tuple[str, str], list[str]] = {}
    for team_name, model in wanted:
        if parent_of(team_name):
            children.setdefault((parent_of(team_name), model), []).append(team_name)
    partial = {(parent_of(team), model) for team, model in unsettled if parent_of(team)}
    # The guarantees this edit changes (a new row counts: it starts capping its children). The page sends every
    # cell, so a cell merely sent again is not what broke a sum.
    touched = {key for key in ((ch.team, ch.gpu_model) for ch in changes)
               if key not in current or current[key] != wanted[key]}
    for (parent, model), kids in sorted(children.items()):
        if (parent, model) not in wanted:
            continue  # no quota row for the parent (it caps nothing), or its own value was refused
        group = {(k, model) for k in kids} | {(parent, model)}
        if not group & touched:
            continue  # an old inconsistency does not block edits that leave these guarantees alone
        total = sum(wanted[(k, model)] for k in kids)
        if total > wanted[(parent, model)]:
            blamed = [parent] if (parent, model) in touched else [k for k in sorted(kids) if (k, model) in touched]
            at_least = "at least " if (parent, model) in partial else ""
            for name in blamed:
                errors.setdefault(f"{name}/{model}.guaranteed", (
                    f"{name}/{model}: the children of {parent} would be guaranteed {at_least}{_shown(total)} GPUs "
                    f"in total, more than {parent}'s {_shown(wanted[(parent, model)])}"
                ))
    return errors


def quota_matrix_set(*, user, changes: list[QuotaChange], reason: str) -> list[Quota]:
    """Apply changes to the quota matrix all together or not at all. Raises ValidationError (keys
    ``team/gpu_model.field``, and ``reason`` when it is blank) with every error at once, and StaleEdit when a
    row changed since the editor read it. Unchanged cells are skipped; each changed cell gets one audit entry
    (before → after, with the reason)."""
    _require_admin(user)
    errors = quota_validate(changes) | reason_errors(reason)
    if errors:
        raise ValidationError(errors)
    saved = []
    with transaction.atomic():
        teams = {t.name: t for t in Team.objects.all()}
        models_ = {m.name: m for m in GpuModel.objects.all()}
        rows = {
            (q.team.name, q.gpu_model.name): q
            for q in Quota.objects.select_for_update(of=("self",)).filter(pool__isnull=True)
            .select_related("team", "gpu_model").order_by("pk")
        }
        stale = []
        for ch in changes:
            row = rows.get((ch.team, ch.gpu_model))
            if row is None:
                if ch.updated_at is not None:
                    stale.append(ch.cell)  # it was deleted meanwhile
                continue
            same = (row.guaranteed, row.limit, row.weight) == (ch.guaranteed, ch.limit, ch.weight)
            if not same and (ch.updated_at is None or row.updated_at != ch.updated_at):
                stale.append(ch.cell)
        if stale:
            raise StaleEdit(stale)
        for ch in changes:
            row = rows.get((ch.team, ch.gpu_model))
            if row is not None and (row.guaranteed, row.limit, row.weight) == (ch.guaranteed, ch.limit, ch.weight):
                continue
            if row is None and ch.guaranteed == 0 and ch.limit is None and ch.weight == 1:
                continue  # an empty cell left empty
            before = quota_snapshot(row)
            if row is None:
                row = Quota(team=teams[ch.team], gpu_model=models_[ch.gpu_model])
            non_lendable = min(row.non_lendable, ch.guaranteed)
            row.guaranteed, row.limit, row.weight, row.non_lendable = (ch.guaranteed, ch.limit, ch.weight,
                                                                       non_lendable)
            row.save()
            audit_record(actor=user, action="quota.create" if before is None else "quota.update",
                         object_type="quota", object_id=row.pk, object_name=ch.cell, before=before,
                         after=quota_snapshot(row), reason=reason)
            saved.append(row)
    return saved


PRIORITY_FIELDS = ("value", "description", "preemptible", "may_preempt", "min_runtime_s", "grace_period_s",
                   "restricted")


def priority_class_snapshot(pc: PriorityClass) -> dict:
    """What the audit log keeps of a class; ``teams``: those granted it (they matter only when restricted)."""
    teams = sorted(pc.teams.values_list("name", flat=True)) if pc.pk else []
    return {"name": pc.name, **{f: getattr(pc, f) for f in PRIORITY_FIELDS}, "teams": teams}


def priority_class_set(*, user, name: str, values: dict, reason: str = "",
                       instance: PriorityClass | None = None, teams: list[Team] | None = None) -> PriorityClass:
    """Create priority class ``name`` or update ``instance`` with ``values`` (fields of PRIORITY_FIELDS)
    and, when given, exactly ``teams`` as the teams granted it (a restricted class is for them only; jobs
    already submitted keep their class). Values must be unique across classes; a change needs a reason."""
    _require_admin(user)
    with transaction.atomic():
        clash = PriorityClass.objects.filter(value=values["value"])
        if instance is not None:
            clash = clash.exclude(pk=instance.pk)
        if clash.exists():
            raise ValidationError({"value": f"value {values['value']} is already used by {clash.first().name}"})
        if instance is None:
            if PriorityClass.objects.filter(name=name).exists():
                raise ValidationError({"name": f"a priority class named {name!r} exists"})
            pc, before = PriorityClass(name=name), None
        else:
            pc = PriorityClass.objects.select_for_update().get(pk=instance.pk)
            before = priority_class_snapshot(pc)
        for field in PRIORITY_FIELDS:
            setattr(pc, field, values[field])
        pc.full_clean()
        granted = before["teams"] if before else []
        if teams is not None:
            granted = sorted({t.name for t in teams})
        after = {**priority_class_snapshot(pc), "teams": granted}
        if before != after:
            _require_reason(reason)
        pc.save()
        if teams is not None:
            pc.teams.set(teams)
        if before != after:
            audit_record(actor=user, action="priority-class.create" if before is None else "priority-class.update",
                         object_type="priority-class", object_id=pc.pk, object_name=pc.name, before=before,
                         after=after, reason=reason)
    return pc


def priority_class_warnings(pc: PriorityClass) -> list[str]:
    """What an admin may not have meant by a class's access settings."""
    granted = pc.teams.exists()
    if pc.restricted and not granted:
        kinds = [kind for kind, d in KINDS.items() if d.priority_class == pc.name]
        also = (f"; it is the default of kind {', '.join(kinds)}, so those jobs need another class chosen"
                if kinds else "")
        return [f"No team may submit with {pc.name} now: it is restricted and no team is ticked{also}."]
    if granted and not pc.restricted:
        return [f"{pc.name} is open to every team: the ticked teams matter only once it is restricted."]
    return []


def pool_set_teams(*, user, pool: Pool, teams: list[Team], reason: str = "") -> Pool:
    """Set which teams may use ``pool`` (tenant isolation): exactly ``teams``. A change needs a reason."""
    _require_admin(user)
    with transaction.atomic():
        pool = Pool.objects.select_for_update().get(pk=pool.pk)
        before = sorted(pool.teams.values_list("name", flat=True))
        after = sorted(t.name for t in teams)
        if before != after:
            _require_reason(reason)
        pool.teams.set(teams)
        if before != after:
            audit_record(actor=user, action="pool.teams", object_type="pool", object_id=pool.pk,
                         object_name=pool.name, before={"teams": before}, after={"teams": after}, reason=reason)
    return pool


def node_change_state(*, user, node: Node, state: str, reason: str) -> Node:
    """Drain or resume ``node`` (a reason is required) and record it in the audit log."""
    _require_admin(user)
    _require_reason(reason)
    with transaction.atomic():
        before = {"state": node.state, "state_reason": node.state_reason}
        try:
            node = node_set_state(node=node, state=state, reason=reason, user=user)
        except NodeProtocolError as exc:
            raise ValidationError({exc.field or "state": str(exc)}) from None
        action = {Node.READY: "node.resume", Node.DRAINING: "node.drain"}.get(state, "node.state")
        audit_record(actor=user, action=action, object_type="node", object_id=node.pk, object_name=node.name,
                     before=before, after={"state": node.state, "state_reason": node.state_reason}, reason=reason)
    return node


def _not_waiting(state: str) -> dict[str, str]:
    return {"state": f"only a pending or held job changes priority class; this one is {state}"}


def job_priority_class_set(*, user, job, priority_class: PriorityClass, reason: str):
    """Move a pending or held job to another priority class (its preemptibility stays); ``reason`` is
    required. A guarded UPDATE: a job that started or ended meanwhile is refused. Audited; wakes the
    scheduling cycle. Raises ValidationError with every error at once (``reason``, ``state``)."""
    _require_admin(user)
    with transaction.atomic():
        before = Job.objects.filter(pk=job.pk).values_list("priority_class__name", "state").first()
        if before is None:
            raise ValidationError({"job": "no such job"})
        errors = reason_errors(reason) | (_not_waiting(before[1]) if before[1] not in WAITING_STATES else {})
        if errors:
            raise ValidationError(errors)
        if before[0] == priority_class.name:
            return job
        updated = Job.objects.filter(pk=job.pk, state__in=WAITING_STATES).update(priority_class=priority_class)
        if updated != 1:  # it started or ended since it was read
            raise ValidationError(_not_waiting(Job.objects.filter(pk=job.pk).values_list("state", flat=True).first()))
        audit_record(actor=user, action="job.priority-class", object_type="job", object_id=job.pk,
                     object_name=f"#{job.pk} {job.name}", before={"priority_class": before[0]},
                     after={"priority_class": priority_class.name}, reason=reason)
        wake_cycle()
    job.refresh_from_db()
    return job


def queue_job_hold(*, user, job, hold: bool, reason: str = ""):
    """Hold (``hold``) or release a waiting job from the admin queue: the job service's hold/release, plus
    an audit entry in the same transaction. The reason is required: the team reads it on its job."""
    _require_admin(user)
    _require_reason(reason)
    with transaction.atomic():
        before = job.state
        if hold:
            job = job_hold(user=user, job=job, why=reason.strip(), admin=True)
        else:
            job = job_release(user=user, job=job, why=reason.strip())
        audit_record(actor=user, action="job.hold" if hold else "job.release", object_type="job", object_id=job.pk,
                     object_name=f"#{job.pk} {job.name}", before={"state": before}, after={"state": job.state},
                     reason=reason)
    return job


BUDGET_FIELDS = ("amount", "warn_percent", "enforce", "action")


def budget_snapshot(budget: Budget) -> dict:
    return {"team": budget.team.name, "unit": budget.unit, "period": budget.period,
            **{f: getattr(budget, f) for f in BUDGET_FIELDS}}


def budget_set(*, user, team: Team, unit: str, values: dict, reason: str = "", instance: Budget | None = None,
               now: datetime | None = None) -> Budget:
    """Create ``team``'s monthly budget in ``unit`` or update ``instance`` with ``values`` (BUDGET_FIELDS). A
    change needs a reason. Its usage and exceeded mark are brought up to date at once, so raising an enforced
    budget lets the team's waiting work start at the next cycle (not after the next usage rollup)."""
    _require_admin(user)
    with transaction.atomic():
        if instance is None:
            if Budget.objects.filter(team=team, unit=unit, period="month").exists():
                raise ValidationError({"unit": f"team {team.name} already has a monthly {unit} budget; edit that "
                                               "one instead"})
            budget, before = Budget(team=team, unit=unit, period="month"), None
        else:
            budget = Budget.objects.select_for_update().select_related("team").get(pk=instance.pk)
            before = budget_snapshot(budget)
        for field in BUDGET_FIELDS:
            if field in values:  # a field left out keeps its value (a new budget: the model's default)
                setattr(budget, field, values[field])
        budget.full_clean(validate_unique=False)
        after = budget_snapshot(budget)
        if before == after:
            return budget
        _require_reason(reason)
        budget.save()
        budgets_refresh(now or db_now(), [budget])
        audit_record(actor=user, action="budget.create" if before is None else "budget.update",
                     object_type="budget", object_id=budget.pk, object_name=f"{team.name} {unit}", before=before,
                     after=after, reason=reason)
    wake_cycle()
    budget.refresh_from_db()
    return budget


def budget_delete(*, user, budget: Budget, reason: str) -> None:
    """Remove a budget (its team is no longer held back by it). Needs a reason."""
    _require_admin(user)
    _require_reason(reason)
    with transaction.atomic():
        budget = Budget.objects.select_for_update().select_related("team").get(pk=budget.pk)
        before = budget_snapshot(budget)
        pk = budget.pk
        budget.delete()
        audit_record(actor=user, action="budget.delete", object_type="budget", object_id=pk,
                     object_name=f"{before['team']} {before['unit']}", before=before, after=None, reason=reason)
    wake_cycle()


def parent_guarantee_errors(team: Team, parent: Team, *, name: str = "") -> list[str]:
    """Why ``team`` cannot move under ``parent``: per GPU model where ``parent`` has a quota and ``team`` a
    guarantee, its children's guarantees with ``team`` among them would pass its own (the rule quota edits
    keep; as there, an overflow the move does not add to is not the move's to fix)."""
    rows = Quota.objects.filter(pool__isnull=True).select_related("gpu_model")
    caps = {q.gpu_model.name: q.guaranteed for q in rows.filter(team=parent)}
    own = {q.gpu_model.name: q.guaranteed for q in rows.filter(team=team, gpu_model__name__in=caps)} if team.pk else {}
    own = {model: g for model, g in own.items() if g > 0}
    if not own:
        return []
    others: dict[str, Decimal] = {}
    for q in rows.filter(team__parent=parent, gpu_model__name__in=own).exclude(team=team):
        others[q.gpu_model.name] = others.get(q.gpu_model.name, Decimal(0)) + q.guaranteed
    name = name or team.name
    out = []
    for model, g in sorted(own.items()):
        total = others.get(model, Decimal(0)) + g
        if total > caps[model]:
            out.append(f"{model}: {parent.name}'s children would be guaranteed {_shown(total)} GPUs in total with "
                       f"{name}, more than {parent.name}'s {_shown(caps[model])}; raise {parent.name}'s guarantee "
                       "first")
    return out
