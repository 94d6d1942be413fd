"""Seed a rate card pricing every GPU model (idempotent): ``manage.py seed_rates``. ``seed_demo`` may call it."""

from datetime import UTC, datetime

from django.core.management.base import BaseCommand

from accounting.services_billing import rate_card_seed


class Command(BaseCommand):
    help = "Create rate card v1 (or add missing GPU models to the newest card) with demo prices per GPU-hour."

    def add_arguments(self, parser):
        parser.add_argument("--effective-from", default="2020-01-01", help="YYYY-MM-DD (UTC) for a new card")
        parser.add_argument("--currency", default="USD")

    def handle(self, *args, effective_from: str, currency: str, **options):
        start = datetime.strptime(effective_from, "%Y-%m-%d").replace(tzinfo=UTC)
        card, created = rate_card_seed(effective_from=start, currency=currency)
        verb = "created" if created else "updated"
        self.stdout.write(f"rate card v{card.version} {verb}: {card.entries.count()} GPU models priced")
