"""A quote before submitting: would the job start now, when otherwise and why, what it costs per hour and
in total at the current rate card, and how much quota the team has left. Read-only: it runs the same
engine on a snapshot with the hypothetical job added, and persists nothing."""

from datetime import UTC, datetime
from decimal import Decimal

from django.db.models import Sum

from scheduler.core.types import PendingInfo, Reason
from scheduler.dependencies import dependency_hold
from scheduler.models import Allocation, Gpu, Job, Quota
from scheduler.services.common import db_now
from scheduler.services.jobs import job_request_checked
from scheduler.services.trial import trial
from scheduler.snapshot import build_snapshot, job_info

QUOTE_JOB_ID = -1


def _price(model: str | None, now: datetime) -> tuple[Decimal | None, str]:
    """Price per GPU-hour of ``model`` at ``now`` and the currency (None when no rate card prices it)."""
    from accounting.rating import RateBook
    from accounting.selectors import rate_cards

    cards = rate_cards()
    book = RateBook(cards)
    card = book.card_at(now)
    if card is None or model is None or model not in card.prices:
        return None, card.currency if card else ""
    return card.prices[model], card.currency


def job_quote(*, user, dependency: str = "", **request) -> dict:
    """Validate ``request`` like a submit (ValidationError names bad fields) and quote it. A job that would
    wait for its ``dependency`` is quoted as waiting for it."""
    job, deps = job_request_checked(user=user, dependency=dependency, **request)
    now = db_now()
    snapshot, _gpu_nodes = build_snapshot(now)
    start, pending = trial(snapshot, job_info(job, job_id=QUOTE_JOB_ID, submitted_at=now.timestamp()))
    if deps:  # a job that would wait for its dependency is quoted as waiting for it
        states = dict(Job.objects.filter(pk__in=[d.on for d in deps]).values_list("pk", "state"))
        hold = dependency_hold([(d.condition, d.on, states[d.on]) for d in deps])
        if hold is not None:
            start = None
            pending = PendingInfo(QUOTE_JOB_ID, Reason(hold.code, hold.message, hold.details), None, None)
    model = job.gpu_model.name if job.gpu_model else None
    if start is not None and start.placements:
        model = Gpu.objects.filter(pk=start.placements[0].gpu_id).values_list("model__name", flat=True).first()
    share = Decimal(str(job.gpu_share))
    price, currency = _price(model, now)
    hourly = (price * share).quantize(Decimal("0.01")) if price is not None else None
    total = None
    if hourly is not None and job.time_limit_minutes:
        total = (hourly * Decimal(job.time_limit_minutes) / 60).quantize(Decimal("0.01"))
    quota = None
    if model:
        row = Quota.objects.filter(team=job.team, gpu_model__name=model).first()
        in_use = (Allocation.objects.filter(ended_at__isnull=True, job__team=job.team, gpu__model__name=model)
                  .aggregate(m=Sum("share_milli"))["m"] or 0) / 1000
        if row is not None:
            limit = float(row.limit) if row.limit is not None else None
            quota = {"gpu_model": model, "guaranteed": float(row.guaranteed), "limit": limit, "in_use": in_use,
                     "remaining": None if limit is None else max(0.0, limit - in_use)}
        else:
            quota = {"gpu_model": model, "guaranteed": 0.0, "limit": 0.0, "in_use": in_use, "remaining": 0.0}
    estimated = None
    if pending is not None and pending.estimated_start is not None:
        estimated = datetime.fromtimestamp(pending.estimated_start, tz=UTC)
    return {
        "starts_now": start is not None,
        "borrowed": start.borrowed if start is not None else 0.0,
        "estimated_start": now if start is not None else estimated,
        "queue_position": pending.queue_position if pending else None,
        "pending_reason": (
            {"code": pending.reason.code, "message": pending.reason.message, "details": dict(pending.reason.details)}
            if pending else None
        ),
        "gpu_model": model, "gpu_share": float(share), "currency": currency,
        "hourly_cost": hourly, "max_total_cost": total, "time_limit_minutes": job.time_limit_minutes,
        "quota": quota,
    }
