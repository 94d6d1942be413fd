"""The rollup task is named, runs the service and is single-flight."""

import pytest

from accounting import tasks
from accounting.models import UsageRecord
from tests.accounting.helpers import T0, allocate, make_job

pytestmark = pytest.mark.django_db


def test_the_rollup_task_is_named_and_scheduled_every_minute(settings):
    assert tasks.usage_rollup.name == "accounting.usage_rollup"
    entry = settings.CELERY_BEAT_SCHEDULE["usage-rollup"]
    assert entry["task"] == "accounting.usage_rollup" and entry["schedule"] == 60.0


def test_the_rollup_task_counts_running_work_up_to_database_now(alice, cluster):
    job = make_job(alice, cluster["vision"])
    allocate(job, "GPU-h100-0", T0, None)
    result = tasks.usage_rollup.apply(kwargs={"unexpected": 1}).get()
    assert result["ran"] is True
    assert UsageRecord.objects.filter(job=job).exists()


def test_the_rollup_command_reconciles(alice, cluster):
    from io import StringIO

    from django.core.management import call_command

    job = make_job(alice, cluster["vision"])
    allocate(job, "GPU-h100-0", T0, None)
    out = StringIO()
    call_command("usage_rollup", "--full", "--check", stdout=out)
    assert "rolled up to" in out.getvalue() and "held" in out.getvalue()
