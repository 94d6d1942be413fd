"""Preemption credits: the work a preemption lost, credited back to the victim's team in chargeback. Pure.

The rule, in one place: a completed preemption's lost GPU-seconds (measured by the scheduler from the
victim's last checkpoint, or its start, to the end of its processes: ``scheduler.checkpoints``) are credited
at the price per GPU-hour of the victim's GPU model on the rate card in force when the preemption completed,
rounded half-up to cents, as a negative cost in the month it completed. The team paid for that GPU time in
its usage lines; the credit line gives back what another job's preemption threw away.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from accounting.rating import SECONDS_PER_HOUR, RateBook, RateCardVersion, cost

CREDIT_KIND = "preemption-credit"


@dataclass(frozen=True, slots=True)
class LostWork:
    """One completed preemption of one attempt of a job, as the selectors read it."""

    preemption_id: int
    completed_at: datetime
    team: str
    department: str
    user: str
    job_id: int
    job_name: str
    attempt: int
    gpu_model: str
    gpu_seconds: Decimal
    by_job_id: int | None = None

    @property
    def gpu_hours(self) -> Decimal:
        return self.gpu_seconds / SECONDS_PER_HOUR


@dataclass(frozen=True, slots=True)
class CreditLine:
    """A lost-work line with its price and its credit (negative: it lowers the team's cost)."""

    lost: LostWork
    rate: Decimal
    card_version: int | None
    credit: Decimal
    currency: str

    def __getattr__(self, name):  # team, job_id, gpu_hours, ... read through to the lost work
        return getattr(self.lost, name)


def credit_lines(lost: Iterable[LostWork], cards: Iterable[RateCardVersion]) -> list[CreditLine]:
    """Price each lost-work line by the credit rule (module docstring); unpriced models credit 0."""
    book = RateBook(cards)
    out = []
    for work in lost:
        price, version = book.price(work.gpu_model, work.completed_at)
        card = book.card_at(work.completed_at)
        out.append(CreditLine(lost=work, rate=price, card_version=version, credit=-cost(work.gpu_seconds, price),
                              currency=card.currency if card else "USD"))
    return out


def credit_rows(credits: Iterable[CreditLine], period: str) -> list[list]:
    """Chargeback rows (``accounting.exports.COLUMNS``) for the credits: kind ``preemption-credit``, the lost
    GPU-hours and the credit negative, so that summing a column gives what the team is charged."""
    return [
        [period, c.department, c.team, c.user, f"credit: #{c.job_id} {c.job_name}, attempt {c.attempt} preempted"
         + (f" by #{c.by_job_id}" if c.by_job_id else ""), CREDIT_KIND, c.gpu_model, None,
         -c.gpu_hours.quantize(Decimal("0.000001")), c.rate, c.card_version, c.credit, c.job_id, c.currency, None,
         None]
        for c in credits
    ]


def credit_by_team(credits: Iterable[CreditLine]) -> dict[str, Decimal]:
    """Each team's total credit (negative)."""
    out: dict[str, Decimal] = {}
    for c in credits:
        out[c.team] = out.get(c.team, Decimal(0)) + c.credit
    return out
