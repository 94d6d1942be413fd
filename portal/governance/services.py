"""Governance writes: quotas, priority classes, pool membership, node state. Each change and its audit entry
commit in one transaction. Only platform admins may call these; views and APIs check that first, and the
services check it again (failing closed)."""

from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from portal.access import is_platform_admin
from portal.audit import audit_record
from portal.models import Team
from scheduler.models import GpuModel, Job, Node, Pool, PriorityClass, Quota
from scheduler.models.jobs import WAITING_STATES
from scheduler.services.jobs import job_hold, job_release
from scheduler.services.nodes import NodeProtocolError, node_set_state

MAX_GPUS = Decimal(100000)


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


def quota_snapshot(quota: Quota | None) -> dict | None:
    if quota is None:
        return None
    return {"team": quota.team.name, "gpu_model": quota.gpu_model.name, "guaranteed": quota.guaranteed,
            "limit": quota.limit, "weight": quota.weight}


def quota_validate(changes: list[QuotaChange]) -> dict[str, str]:
    """Errors keyed ``team/gpu_model.field`` for a set of changes, judged together with the quotas that stay
    as they are: each cell at most once, limit ≥ guaranteed, weight > 0, and each parent's guarantee covers its
    children's."""
    # A cell given twice: which values were meant is anyone's guess, so refuse rather than let the last win.
    repeated = {cell: n for cell, n in Counter(ch.cell for ch in changes).items() if n > 1}
    if repeated:
        return {f"{cell}.cell": f"{cell} appears {n} times; give each team × GPU model cell once"
                for cell, n in repeated.items()}
    errors: dict[str, str] = {}
    teams = {t.name: t for t in Team.objects.all()}
    models_ = {m.name: m for m in GpuModel.objects.all()}
    for ch in changes:
        if ch.team not in teams:
            errors[f"{ch.cell}.team"] = f"no team named {ch.team!r}"
            continue
        if ch.gpu_model not in models_:
            errors[f"{ch.cell}.gpu_model"] = f"no GPU model named {ch.gpu_model!r}"
            continue
        if ch.guaranteed < 0 or ch.guaranteed > MAX_GPUS:
            errors[f"{ch.cell}.guaranteed"] = f"{ch.cell}: guaranteed must be between 0 and {MAX_GPUS}"
        if ch.limit is not None and ch.limit < ch.guaranteed:
            errors[f"{ch.cell}.limit"] = (
                f"{ch.cell}: limit {ch.limit} is below the guaranteed {ch.guaranteed}; a limit must be ≥ the guarantee"
            )
        if ch.weight <= 0 or ch.weight > 10000:
            errors[f"{ch.cell}.weight"] = f"{ch.cell}: weight must be above 0 and at most 10000"
    if errors:
        return errors
    # The matrix after the change: (team, model) -> guaranteed.
    wanted = {
        (q.team.name, q.gpu_model.name): q.guaranteed
        for q in Quota.objects.filter(pool__isnull=True).select_related("team", "gpu_model")
    }
    for ch in changes:
        wanted[(ch.team, ch.gpu_model)] = ch.guaranteed
    by_id = {t.pk: t for t in teams.values()}
    children: dict[tuple[str, str], list[str]] = {}
    for (team_name, model), _g in wanted.items():
        parent_id = teams[team_name].parent_id
        if parent_id:
            children.setdefault((by_id[parent_id].name, model), []).append(team_name)
    touched = {(ch.team, ch.gpu_model) for ch in changes}
    for (parent, model), kids in sorted(children.items()):
        if (parent, model) not in wanted:
            continue  # a parent without a quota row for this model does not cap its children
        group = {(k, model) for k in kids} | {(parent, model)}
        if not group & touched:
            continue  # an old inconsistency does not block unrelated edits
        total = sum(wanted[(k, model)] for k in kids)
        if total > wanted[(parent, model)]:
            blamed = [parent] if (parent, model) in touched else [k for k in sorted(kids) if (k, model) in touched]
            for name in blamed:
                errors[f"{name}/{model}.guaranteed"] = (
                    f"{name}/{model}: the children of {parent} would be guaranteed {total} GPUs in total, more "
                    f"than {parent}'s {wanted[(parent, model)]}"
                )
    return errors


def quota_matrix_set(*, user, changes: list[QuotaChange], reason: str = "") -> list[Quota]:
    """Apply changes to the quota matrix all together or not at all. Raises ValidationError (keys
    ``team/gpu_model.field``) for inconsistent values and StaleEdit when a row changed since the editor read
    it. Unchanged cells are skipped; each changed cell gets one audit entry (before → after)."""
    _require_admin(user)
    errors = quota_validate(changes)
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


PRIORITY_FIELDS = ("value", "description", "preemptible", "may_preempt", "min_runtime_s", "grace_period_s")


def priority_class_snapshot(pc: PriorityClass) -> dict:
    return {"name": pc.name, **{f: getattr(pc, f) for f in PRIORITY_FIELDS}}


def priority_class_set(*, user, name: str, values: dict, reason: str = "",
                       instance: PriorityClass | None = None) -> PriorityClass:
    """Create priority class ``name`` or update ``instance`` with ``values`` (fields of PRIORITY_FIELDS).
    Values must be unique across classes."""
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
        pc.save()
        after = priority_class_snapshot(pc)
        if before != after:
            audit_record(actor=user, action="priority-class.create" if before is None else "priority-class.update",
                         object_type="priority-class", object_id=pc.pk, object_name=pc.name, before=before,
                         after=after, reason=reason)
    return pc


def pool_set_teams(*, user, pool: Pool, teams: list[Team], reason: str = "") -> Pool:
    """Set which teams may use ``pool`` (tenant isolation): exactly ``teams``."""
    _require_admin(user)
    with transaction.atomic():
        pool = Pool.objects.select_for_update().get(pk=pool.pk)
        before = sorted(pool.teams.values_list("name", flat=True))
        pool.teams.set(teams)
        after = sorted(t.name for t in teams)
        if before != after:
            audit_record(actor=user, action="pool.teams", object_type="pool", object_id=pool.pk,
                         object_name=pool.name, before={"teams": before}, after={"teams": after}, reason=reason)
    return pool


def node_change_state(*, user, node: Node, state: str, reason: str) -> Node:
    """Drain or resume ``node`` (a reason is required) and record it in the audit log."""
    _require_admin(user)
    if not (reason or "").strip():
        raise ValidationError({"reason": "a reason is required"})
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


def _wake_cycle() -> None:
    """A scheduling cycle once the transaction commits (a hint: beat runs it anyway)."""
    from scheduler.tasks import run_cycle

    run_cycle.delay_on_commit()


def job_priority_class_set(*, user, job, priority_class: PriorityClass, reason: str = ""):
    """Move a pending or held job to another priority class (its preemptibility stays). A guarded UPDATE:
    a job that started or ended meanwhile is refused. Audited; wakes the scheduling cycle."""
    _require_admin(user)
    with transaction.atomic():
        before = Job.objects.filter(pk=job.pk).values_list("priority_class__name", "state").first()
        if before is None:
            raise ValidationError({"job": "no such job"})
        if before[0] == priority_class.name:
            return job
        updated = Job.objects.filter(pk=job.pk, state__in=WAITING_STATES).update(priority_class=priority_class)
        if updated != 1:
            raise ValidationError({"state": f"only a pending or held job changes priority class; this one is "
                                            f"{before[1]}"})
        audit_record(actor=user, action="job.priority-class", object_type="job", object_id=job.pk,
                     object_name=f"#{job.pk} {job.name}", before={"priority_class": before[0]},
                     after={"priority_class": priority_class.name}, reason=reason)
        _wake_cycle()
    job.refresh_from_db()
    return job


def queue_job_hold(*, user, job, hold: bool, reason: str = ""):
    """Hold (``hold``) or release a waiting job from the admin queue: the job service's hold/release, plus
    an audit entry in the same transaction."""
    _require_admin(user)
    with transaction.atomic():
        before = job.state
        job = (job_hold if hold else job_release)(user=user, job=job)
        audit_record(actor=user, action="job.hold" if hold else "job.release", object_type="job", object_id=job.pk,
                     object_name=f"#{job.pk} {job.name}", before={"state": before}, after={"state": job.state},
                     reason=reason)
    return job
