"""A big backlog must not make the cycle crawl: persisting thousands of pending reasons is one cheap pass."""

import pytest

from scheduler.cycle import run_cycle
from scheduler.models import Job
from tests.reliability.helpers import backlog

pytestmark = pytest.mark.django_db


def test_a_cycle_over_a_3000_job_backlog_persists_its_pending_reasons_in_seconds(alice, cluster):
    backlog(alice, cluster["vision"], 3000)
    report = run_cycle()
    print(f"\n[figure] cycle over 3000 pending jobs: {report.phases_ms}")
    assert report.pending == 3000
    assert report.phases_ms["persist"] < 5000  # was ~25 s with Django's bulk_update (CASE WHEN per row)
    assert not Job.objects.filter(state="pending", queue_position__isnull=True).exists()
    sample = Job.objects.filter(state="pending").order_by("queue_position").first()
    assert sample.queue_position == 1 and sample.pending_reason_code and sample.pending_reason_message
    assert isinstance(sample.pending_reason_details, dict)
