"""Celery tasks: thin, named wrappers over the accounting services. Safe to run twice."""

from celery import shared_task

from accounting.budgets import budgets_refresh
from accounting.services import usage_rollup as _usage_rollup
from accounting.services_billing import statements_close_month
from scheduler.services.common import db_now


@shared_task(name="accounting.usage_rollup", time_limit=120, soft_time_limit=100, ignore_result=True)
def usage_rollup(**_ignored) -> dict:
    """Bring the usage ledger up to database now (single-flight: returns at once if one is running); once a
    month has closed, store its statements per team."""
    report = _usage_rollup().as_dict()
    if report["ran"]:
        now = db_now()
        report["statements"] = statements_close_month(now=now)
        report["over_budget"] = budgets_refresh(now)
    return report
