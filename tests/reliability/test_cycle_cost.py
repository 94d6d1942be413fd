"""A big backlog must not make the cycle crawl: a cycle's statements do not grow with the queue (pending
reasons of thousands of jobs go in one statement). Its time is printed as a figure, never asserted."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduler.cycle import run_cycle
from scheduler.models import Job
from tests.reliability.helpers import backlog

pytestmark = pytest.mark.django_db


def _cycle_statements() -> tuple[int, dict]:
    with CaptureQueriesContext(connection) as captured:
        report = run_cycle()
    return len(captured.captured_queries), report


def test_a_cycle_over_a_3000_job_backlog_costs_the_statements_of_a_30_job_one(alice, cluster):
    backlog(alice, cluster["vision"], 30)
    small, report = _cycle_statements()
    assert report.pending == 30
    backlog(alice, cluster["vision"], 2970)
    big, report = _cycle_statements()
    print(f"\n[figure] cycle over 3000 pending jobs: {report.phases_ms} ({big} statements through Django)")
    assert report.pending == 3000
    assert big == small  # nothing per job (was one UPDATE per job, then a CASE WHEN per row)
    assert not Job.objects.filter(state="pending", queue_position__isnull=True).exists()
    sample = Job.objects.filter(state="pending").order_by("queue_position").first()
    assert sample.queue_position == 1 and sample.pending_reason_code and sample.pending_reason_message
    assert isinstance(sample.pending_reason_details, dict)
