"""A waiting job's page names the scheduler plugin that decided, beside the reason's numbers."""

import pytest

from scheduler.cycle import run_cycle
from scheduler.services.jobs import job_submit

pytestmark = pytest.mark.django_db


def submit(user, **kw):
    return job_submit(user=user, **{"name": "j", "command": "true", "gpu_model": "h100-80gb", **kw})


def test_a_job_over_its_team_limit_names_the_quota_plugin_and_the_numbers_on_its_page(alice, client):
    submit(alice, gpus=4)
    over = submit(alice, gpus=1)
    run_cycle()
    over.refresh_from_db()
    assert over.pending_reason_code == "QuotaExceeded" and over.pending_reason_details["plugin"] == "quota"
    client.force_login(alice)
    body = client.get(f"/jobs/{over.pk}/").content.decode()
    assert over.pending_reason_message in body and "(decided by the scheduler's quota rules)" in body
    assert "holds 4/4" in over.pending_reason_message and "job needs 1" in over.pending_reason_message
