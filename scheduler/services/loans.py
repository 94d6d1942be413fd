"""Quota loans: ask, approve, decline, cancel, and the record of their end. Each write and its audit entry
commit in one transaction. A team-admin of the borrower asks; a team-admin of the lender (or a platform
admin) approves or declines; the borrower's team-admins (or a platform admin) cancel. Reads: ``loans_for``."""

from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import Q, QuerySet, Sum

from portal.access import is_platform_admin, role_in, teams_for
from portal.audit import audit_record
from portal.models import Membership, Team
from scheduler.models import GpuModel, Quota, QuotaLoan
from scheduler.services.common import db_now

MAX_LOAN_GPUS = Decimal(100000)  # as a quota's guarantee
MAX_LOAN_DAYS = 366
GPU_STEP = Decimal("0.001")
MAX_REASON = 500


def _is_admin_of(user, team: Team) -> bool:
    return is_platform_admin(user) or role_in(user, team) == Membership.TEAM_ADMIN


def loans_for(user) -> QuerySet[QuotaLoan]:
    """The loans ``user`` may see: those of the teams they belong to, lent or borrowed (platform admins: all)."""
    qs = QuotaLoan.objects.select_related("lender", "borrower", "gpu_model", "requested_by", "decided_by")
    if is_platform_admin(user):
        return qs
    teams = teams_for(user)
    return qs.filter(Q(lender__in=teams) | Q(borrower__in=teams))


def loan_for(user, loan_id) -> QuotaLoan:
    """One loan ``user`` may see; another team's loan is the same ``QuotaLoan.DoesNotExist`` as a missing one."""
    return loans_for(user).get(pk=loan_id)


def _snapshot(loan: QuotaLoan) -> dict:
    return {"lender": loan.lender.name, "borrower": loan.borrower.name, "gpu_model": loan.gpu_model.name,
            "gpus": loan.gpus, "starts_at": loan.starts_at, "ends_at": loan.ends_at, "state": loan.state}


def _lendable(lender: Team, model: GpuModel, starts_at: datetime, ends_at: datetime, *, but: int | None = None
              ) -> Decimal:
    """What ``lender`` may still lend of ``model`` over the whole window: its all-pools guarantee less its
    approved loans of the model that overlap the window (at their busiest they may all run at once)."""
    guaranteed = Quota.objects.filter(team=lender, gpu_model=model, pool__isnull=True).values_list(
        "guaranteed", flat=True).first() or Decimal(0)
    lent = QuotaLoan.objects.filter(lender=lender, gpu_model=model, state=QuotaLoan.APPROVED, starts_at__lt=ends_at,
                                    ends_at__gt=starts_at).exclude(pk=but).aggregate(s=Sum("gpus"))["s"] or Decimal(0)
    return max(Decimal(0), guaranteed - lent)


def _parse_gpus(raw) -> tuple[Decimal | None, str | None]:
    try:
        value = Decimal(str(raw).strip()) if raw is not None and not isinstance(raw, bool) else None
    except InvalidOperation:
        value = None
    if value is None or not value.is_finite():
        return None, f"must be a number of GPUs; got {str(raw)[:20]!r}"
    if not Decimal(0) < value <= MAX_LOAN_GPUS:
        return None, f"must be above 0 and at most {MAX_LOAN_GPUS}; got {value}"
    if value != value.quantize(GPU_STEP):
        return None, "at most 3 decimal places"
    return value.quantize(GPU_STEP), None


def loan_request(*, user, borrower: Team, lender: str, gpu_model: str, gpus, starts_at: datetime | None,
                 ends_at: datetime | None, reason: str) -> QuotaLoan:
    """Ask ``lender`` (a team name) for ``gpus`` of its guarantee of ``gpu_model`` during the window, for
    ``borrower`` (whose team-admin ``user`` is). ValidationError names every bad field."""
    if not _is_admin_of(user, borrower):
        raise PermissionDenied(f"only team-admins of {borrower.name} and platform admins ask loans for it")
    errors: dict[str, str] = {}
    lender_team = Team.objects.filter(name=lender).first() if isinstance(lender, str) else None
    if lender_team is None:
        errors["lender"] = f"no team named {str(lender)[:60]!r}"
    elif lender_team.pk == borrower.pk:
        errors["lender"] = "a team cannot lend to itself"
    model = GpuModel.objects.filter(name=gpu_model).first() if isinstance(gpu_model, str) else None
    if model is None:
        known = ", ".join(GpuModel.objects.order_by("name").values_list("name", flat=True))
        errors["gpu_model"] = f"unknown GPU model {str(gpu_model)[:60]!r}; known: {known}"
    amount, problem = _parse_gpus(gpus)
    if problem:
        errors["gpus"] = problem
    now = db_now()
    if starts_at is None:
        errors["starts_at"] = "must be a date and time"
    if ends_at is None:
        errors["ends_at"] = "must be a date and time"
    elif ends_at <= now:
        errors["ends_at"] = f"must be in the future (now is {now:%Y-%m-%d %H:%M} UTC)"
    elif starts_at is not None and ends_at <= starts_at:
        errors["ends_at"] = "must be after starts_at"
    elif starts_at is not None and ends_at - starts_at > timedelta(days=MAX_LOAN_DAYS):
        errors["ends_at"] = f"a loan lasts at most {MAX_LOAN_DAYS} days"
    reason = (reason or "").strip()
    if not reason:
        errors["reason"] = "say why the team needs the GPUs (the lender reads it; it is kept in the audit log)"
    elif len(reason) > MAX_REASON:
        errors["reason"] = f"at most {MAX_REASON} characters; got {len(reason)}"
    if not errors:
        lendable = _lendable(lender_team, model, starts_at, ends_at)
        if amount > lendable:
            errors["gpus"] = (f"team {lender_team.name} can lend at most {lendable.normalize()} {model.name} in that "
                              f"window (its guarantee less its other loans); asked {amount.normalize()}")
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        loan = QuotaLoan.objects.create(lender=lender_team, borrower=borrower, gpu_model=model, gpus=amount,
                                        starts_at=starts_at, ends_at=ends_at, reason=reason, requested_by=user)
        audit_record(actor=user, action="quota_loan.request", object_type="quota_loan", object_id=loan.pk,
                     object_name=str(loan), before=None, after=_snapshot(loan), reason=reason)
    return loan


def _decide(*, user, loan: QuotaLoan, to_state: str, note: str, who: Team, action: str) -> QuotaLoan:
    if not _is_admin_of(user, who):
        raise PermissionDenied(f"only team-admins of {who.name} and platform admins may {action} this loan")
    with transaction.atomic():
        Team.objects.select_for_update().filter(pk=loan.lender_id).first()  # one decision per lender at a time
        loan = QuotaLoan.objects.select_for_update().select_related("lender", "borrower", "gpu_model").get(pk=loan.pk)
        before = _snapshot(loan)
        now = db_now()
        allowed = (QuotaLoan.REQUESTED, QuotaLoan.APPROVED) if to_state == QuotaLoan.CANCELLED else (
            QuotaLoan.REQUESTED,)
        if loan.state not in allowed or (loan.state == QuotaLoan.APPROVED and loan.ends_at <= now):
            raise ValidationError({"state": f"only a {' or '.join(allowed)} loan can be {to_state}; this one is "
                                            f"{loan.status_at(now)}"})
        if to_state == QuotaLoan.APPROVED:
            if loan.ends_at <= now:
                raise ValidationError({"ends_at": "the loan's window is over: ask again with a new one"})
            lendable = _lendable(loan.lender, loan.gpu_model, loan.starts_at, loan.ends_at, but=loan.pk)
            if loan.gpus > lendable:
                raise ValidationError({"gpus": f"team {loan.lender.name} can lend at most {lendable.normalize()} "
                                               f"{loan.gpu_model.name} in that window now; the loan asks "
                                               f"{loan.gpus.normalize()}"})
        if to_state == QuotaLoan.CANCELLED and loan.state == QuotaLoan.APPROVED and loan.starts_at < now:
            loan.ends_at = now  # a running loan ends now: the guarantee goes back at the next cycle
        loan.state, loan.decided_by, loan.decided_at = to_state, user, now
        loan.decision_note = (note or "").strip()[:MAX_REASON]
        loan.save(update_fields=["state", "decided_by", "decided_at", "decision_note", "ends_at"])
        audit_record(actor=user, action=f"quota_loan.{action}", object_type="quota_loan", object_id=loan.pk,
                     object_name=str(loan), before=before, after=_snapshot(loan), reason=note)
        from scheduler.services.jobs import wake_cycle

        wake_cycle()
    return loan


def loan_approve(*, user, loan: QuotaLoan, note: str = "") -> QuotaLoan:
    """The lender (a team-admin of it, or a platform admin) approves: from ``starts_at`` the engine counts it."""
    return _decide(user=user, loan=loan, to_state=QuotaLoan.APPROVED, note=note, who=loan.lender, action="approve")


def loan_decline(*, user, loan: QuotaLoan, note: str = "") -> QuotaLoan:
    """The lender (a team-admin of it, or a platform admin) declines a request."""
    return _decide(user=user, loan=loan, to_state=QuotaLoan.DECLINED, note=note, who=loan.lender, action="decline")


def loan_cancel(*, user, loan: QuotaLoan, note: str = "") -> QuotaLoan:
    """The borrower (a team-admin of it, or a platform admin) withdraws a request or ends a loan early."""
    return _decide(user=user, loan=loan, to_state=QuotaLoan.CANCELLED, note=note, who=loan.borrower, action="cancel")


def loans_end(*, now: datetime | None = None) -> list[int]:
    """Record the end of approved loans whose window is over (the engine stopped counting them at their end):
    each becomes ``ended`` with an audit entry by the system. Safe to run twice."""
    now = now or db_now()
    ended = []
    with transaction.atomic():
        for loan in QuotaLoan.objects.select_for_update(skip_locked=True).select_related(
                "lender", "borrower", "gpu_model").filter(state=QuotaLoan.APPROVED, ends_at__lte=now).order_by("pk"):
            before = _snapshot(loan)
            loan.state = QuotaLoan.ENDED
            loan.save(update_fields=["state"])
            audit_record(actor=None, action="quota_loan.end", object_type="quota_loan", object_id=loan.pk,
                         object_name=str(loan), before=before, after=_snapshot(loan),
                         reason=f"the loan's window ended at {loan.ends_at:%Y-%m-%d %H:%M} UTC")
            ended.append(loan.pk)
    return ended
