"""Quota loans on the statements: each loan that ran in a period appears on both teams' statements, as
lent by one and borrowed by the other, with the guarantee it moved in GPU-hours inside the period (its GPUs ×
the hours of its window that fall in the period). A loan moves guarantee, not usage: the GPU-hours the
borrower ran on it are in its usage and cost like any other."""

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db.models import F, Q

from scheduler.models import QuotaLoan


@dataclass(frozen=True)
class LoanLine:
    """One side of a loan for one team: ``direction`` is ``lent`` or ``borrowed``; ``other`` the other team."""

    loan_id: int
    team: str
    direction: str
    other: str
    gpu_model: str
    gpus: Decimal
    starts_at: datetime
    ends_at: datetime
    guarantee_gpu_hours: Decimal


def loan_lines(teams: set[str] | None, *, start: datetime, end: datetime) -> list[LoanLine]:
    """The loans that ran in ``[start, end)`` for ``teams`` (None: every team), both sides, by team then
    start. A loan ran when it was approved (it may have ended or been cancelled once running: its window then
    ends when it was cancelled). One query."""
    ran = Q(state__in=(QuotaLoan.APPROVED, QuotaLoan.ENDED)) | Q(state=QuotaLoan.CANCELLED,
                                                                   decided_at__gt=F("starts_at"))
    loans = QuotaLoan.objects.filter(ran, starts_at__lt=end, ends_at__gt=start).select_related(
        "lender", "borrower", "gpu_model").order_by("starts_at", "id")
    out = []
    for loan in loans:
        hours = Decimal((min(loan.ends_at, end) - max(loan.starts_at, start)).total_seconds()) / Decimal(3600)
        moved = (loan.gpus * hours).quantize(Decimal("0.01"))
        for team, direction, other in ((loan.lender.name, "lent", loan.borrower.name),
                                       (loan.borrower.name, "borrowed", loan.lender.name)):
            if teams is None or team in teams:
                out.append(LoanLine(loan.pk, team, direction, other, loan.gpu_model.name, loan.gpus, loan.starts_at,
                                    loan.ends_at, moved))
    return sorted(out, key=lambda x: (x.team, x.starts_at, x.loan_id))
