"""Writes for billing: rate cards (versions are never edited, so past charges stand) and the monthly statements
stored per team once a month has closed and the usage ledger is rolled past its end
(``accounting.services``)."""

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from django.db import transaction

from accounting.models import RateCard, RateCardEntry, RollupState, Statement
from accounting.services import LATE_COMMIT_SLACK
from scheduler.models import GpuModel

# Demo prices per GPU-hour (USD) by GPU model name prefix; MIG profiles priced by their slice.
DEFAULT_PRICES = {
    "h100": Decimal("4.00"),
    "h200": Decimal("5.00"),
    "a100-80gb": Decimal("2.80"),
    "a100-40gb": Decimal("2.20"),
    "a100-1g": Decimal("0.35"),
    "a100-2g": Decimal("0.70"),
    "a100-3g": Decimal("1.05"),
    "l40s": Decimal("1.40"),
    "l4": Decimal("0.60"),
    "ascend": Decimal("1.80"),
}
FALLBACK_PRICE = Decimal("1.00")


def default_price(gpu_model: str) -> Decimal:
    for prefix in sorted(DEFAULT_PRICES, key=len, reverse=True):
        if gpu_model.startswith(prefix):
            return DEFAULT_PRICES[prefix]
    return FALLBACK_PRICE


def rate_card_create(
    *, version: int, effective_from: datetime, prices: dict[str, Decimal], currency: str = "USD", name: str = ""
) -> RateCard:
    """Create rate card ``version`` with a price per GPU-hour for each named GPU model."""
    with transaction.atomic():
        card = RateCard.objects.create(version=version, effective_from=effective_from, currency=currency, name=name)
        models = {m.name: m for m in GpuModel.objects.filter(name__in=list(prices))}
        RateCardEntry.objects.bulk_create(
            [
                RateCardEntry(rate_card=card, gpu_model=models[n], price_per_gpu_hour=p)
                for n, p in prices.items()
                if n in models
            ]
        )
    return card


def rate_card_add_price(*, gpu_model: GpuModel, price: Decimal, effective_from: datetime) -> RateCard:
    """A new rate card version from ``effective_from``: the newest card's prices (and currency) and
    ``gpu_model`` at ``price`` per GPU-hour. Earlier versions are never edited, so past charges stand."""
    with transaction.atomic():
        newest = RateCard.objects.select_for_update().order_by("-version").first()
        card = RateCard.objects.create(
            version=(newest.version + 1) if newest else 1, effective_from=effective_from,
            currency=newest.currency if newest else "USD", name=newest.name if newest else "",
            notes=f"adds {gpu_model.name}"[:300])
        entries = [RateCardEntry(rate_card=card, gpu_model_id=e.gpu_model_id, price_per_gpu_hour=e.price_per_gpu_hour)
                   for e in (newest.entries.exclude(gpu_model=gpu_model) if newest else [])]
        entries.append(RateCardEntry(rate_card=card, gpu_model=gpu_model, price_per_gpu_hour=price))
        RateCardEntry.objects.bulk_create(entries)
    return card


def rate_card_seed(*, effective_from: datetime, currency: str = "USD") -> tuple[RateCard, bool]:
    """Ensure a rate card exists pricing every GPU model (idempotent). Missing models are added to the
    newest card; returns (card, created)."""
    card = RateCard.objects.order_by("-effective_from").first()
    created = card is None
    if card is None:
        card = RateCard.objects.create(version=1, effective_from=effective_from, currency=currency, name="Demo rates")
    priced = set(card.entries.values_list("gpu_model_id", flat=True))
    RateCardEntry.objects.bulk_create(
        [
            RateCardEntry(rate_card=card, gpu_model=m, price_per_gpu_hour=default_price(m.name))
            for m in GpuModel.objects.exclude(pk__in=priced)
        ]
    )
    return card, created


def statements_store(*, month_start: date, replace: bool = False) -> int:
    """Store an XLSX workbook and a PDF statement for every team with usage in the month starting at
    ``month_start``. Idempotent: existing statements are kept unless ``replace``. Returns how many were stored."""
    from accounting import exports
    from accounting.credits import credit_lines
    from accounting.loans import loan_lines
    from accounting.periods import parse_month
    from accounting.rating import rate_lines
    from accounting.reports import idle_for
    from accounting.selectors import rate_cards, team_usage_lines, teams_with_usage
    from accounting.selectors_credits import lost_work
    from accounting.selectors_fairness import fairness_for

    month = parse_month(month_start.strftime("%Y-%m"))
    period = month_start.strftime("%Y-%m")
    cards = rate_cards()
    idle = idle_for(month, now=month.end, agg="month", visible=None, cards=cards)
    fairness = {f.team: f for f in fairness_for(None, start=month.start, end=month.end, now=month.end)}
    stored = 0
    for team in teams_with_usage(start=month.start, end=month.end):
        existing = set(Statement.objects.filter(team=team, month=month_start).values_list("format", flat=True))
        if existing >= {"xlsx", "pdf"} and not replace:
            continue
        lines = rate_lines(team_usage_lines(team, start=month.start, end=month.end), cards)
        team_idle = idle.for_teams([team.name])
        team_fairness = [fairness[team.name]] if team.name in fairness else []
        loans = loan_lines({team.name}, start=month.start, end=month.end)
        credits = credit_lines(lost_work({team.name}, start=month.start, end=month.end), cards)
        files = {
            "xlsx": exports.xlsx_bytes(lines, period, cards, team_idle, team_fairness, loans, credits),
            "pdf": exports.pdf_bytes(lines, month.label, [team.name], team_idle, team_fairness, loans, credits),
        }
        for fmt, content in files.items():
            if fmt in existing and not replace:
                continue
            Statement.objects.update_or_create(
                team=team, month=month_start, format=fmt, defaults={"content": content, "size": len(content)}
            )
            stored += 1
    return stored


def statements_close_month(*, now: datetime) -> int:
    """Once last month has closed and the ledger is rolled an hour past its end, store its statements,
    once (the marker row is locked, so two workers never store the same month twice)."""
    from accounting.periods import month_start as first_of

    this_month = first_of(now.date())
    previous = first_of(this_month - timedelta(days=1))
    marker = datetime(previous.year, previous.month, 1, tzinfo=UTC)
    closed_at = datetime(this_month.year, this_month.month, 1, tzinfo=UTC) + LATE_COMMIT_SLACK
    rolled = RollupState.objects.filter(key="usage").values_list("rolled_until", flat=True).first()
    if not rolled or rolled < closed_at:
        return 0
    RollupState.objects.get_or_create(key="statements")
    with transaction.atomic():
        state = RollupState.objects.select_for_update().get(key="statements")
        if state.rolled_until and state.rolled_until >= marker:
            return 0
        stored = statements_store(month_start=previous)
        state.rolled_until = marker
        state.save(update_fields=["rolled_until", "updated_at"])
    return stored
