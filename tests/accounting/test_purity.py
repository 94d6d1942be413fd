"""Slicing, rating, periods, charts, fairness, idle cost, capacity and number formatting import without Django: pure
functions over plain data."""

import subprocess
import sys

SCRIPT = """
import sys
for name in ("django", "celery", "rest_framework", "psycopg", "redis"):
    sys.modules[name] = None
import accounting.slicing, accounting.rating, accounting.periods, accounting.charts  # noqa
import accounting.fairness, accounting.idle, accounting.capacity, accounting.numbers, accounting.credits  # noqa
print("ok")
"""


def test_it_imports_the_pure_accounting_modules_without_django():
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
