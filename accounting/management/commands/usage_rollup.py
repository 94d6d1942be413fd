"""Roll the usage ledger up now and check it: ``manage.py usage_rollup [--full] [--check]``."""

from django.core.management.base import BaseCommand, CommandError

from accounting.services import usage_reconcile, usage_rollup


class Command(BaseCommand):
    help = "Bring the usage ledger up to database now; --full recomputes every allocation; --check reconciles."

    def add_arguments(self, parser):
        parser.add_argument("--full", action="store_true", help="recompute every allocation (repair)")
        parser.add_argument("--check", action="store_true", help="fail unless ledger GPU-seconds equal held ones")

    def handle(self, *args, full: bool, check: bool, **options):
        report = usage_rollup(full=full)
        if not report.ran:
            raise CommandError("another rollup is running; try again in a moment")
        self.stdout.write(
            f"rolled up to {report.until:%Y-%m-%d %H:%M:%S} UTC: {report.allocations} allocations, "
            f"{report.rows} rows written, {report.deleted} deleted"
        )
        if check:
            result = usage_reconcile(until=report.until)
            self.stdout.write(f"ledger {result.ledger_gpu_seconds} GPU-s, held {result.held_gpu_seconds} GPU-s")
            if not result.ok:
                raise CommandError(f"ledger differs from allocations by {result.difference} GPU-seconds")
