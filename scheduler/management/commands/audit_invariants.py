"""Check the database's invariants: ``manage.py audit_invariants [--json] [--no-ledger]``; exit 1 on findings."""

import json
import sys
import time

from django.core.management.base import BaseCommand

from scheduler.audit import CHECKS, audit


class Command(BaseCommand):
    help = "Audit scheduler invariants (GPUs, nodes, quotas, job histories, allocations, usage ledger)."

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true", dest="as_json", help="print a JSON object instead of text")
        parser.add_argument("--no-ledger", action="store_true", help="skip the usage ledger reconciliation")
        parser.add_argument("--check", action="append", choices=sorted(CHECKS), help="run only these checks")

    def handle(self, *args, as_json: bool = False, no_ledger: bool = False, check=None, **options):
        started = time.perf_counter()
        findings = audit(ledger=not no_ledger, only=check)
        elapsed_ms = round((time.perf_counter() - started) * 1000, 1)
        if as_json:
            self.stdout.write(json.dumps({"ok": not findings, "findings": findings, "elapsed_ms": elapsed_ms}))
        elif findings:
            for line in findings:
                self.stdout.write(line)
            self.stdout.write(f"{len(findings)} invariant violation(s) found in {elapsed_ms} ms")
        else:
            self.stdout.write(f"all invariants hold ({elapsed_ms} ms)")
        if findings:
            sys.exit(1)

