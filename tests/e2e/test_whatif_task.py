"""The what-if replay runs in a real Celery worker and reports progress on the stored run."""

from datetime import timedelta

import pytest

from scheduler.models import WhatIfRun
from scheduler.services.common import db_now
from scheduler.whatif import whatif_create
from tests.processes import wait_for
from tests.scheduler.test_whatif import past_job

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_a_queued_what_if_is_replayed_by_the_worker(admin_user, alice, cluster, celery_worker):
    gpu = cluster["nodes"][0].gpus.first()
    t0 = db_now() - timedelta(days=1)
    past_job(alice, cluster["vision"], gpu, submitted=t0, waited_s=10, ran_s=600)
    run = whatif_create(user=admin_user, name="worker", period_start=t0 - timedelta(hours=1),
                        period_end=t0 + timedelta(hours=1),
                        changes={"pool_scale": {"train": 2}})
    wait_for(lambda: WhatIfRun.objects.get(pk=run.pk).state == WhatIfRun.DONE, timeout=60,
             what="the worker to run the what-if")
    run.refresh_from_db()
    assert run.progress == 1.0 and run.result["jobs_replayed"] == 1
    assert run.result["changed"]["vision"]["jobs"] == 1.0
