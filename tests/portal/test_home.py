"""The home dashboard: your teams' counts, why work waits (only your teams'), links to team dashboards."""

import pytest
from django.test import Client

from scheduler.cycle import run_cycle
from scheduler.services.jobs import job_submit

pytestmark = pytest.mark.django_db


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_home_summarizes_why_your_work_waits_and_nothing_of_other_teams(alice, charlie):
    job_submit(user=alice, name="fills", command="true", gpu_model="h100-80gb", gpus=4)
    run_cycle()
    job_submit(user=alice, name="waits", command="true", gpu_model="h100-80gb", gpus=2)
    run_cycle()
    page = client_for(alice).get("/").content.decode()
    waits = page.split("Why work waits", 1)[1].split("Ready capacity", 1)[0]
    assert "QuotaExceeded" in waits or "OverLimit" in waits
    other = client_for(charlie).get("/").content.decode()
    assert "Nothing of yours is waiting." in other and 'href="/teams/nlp/"' in other
    assert 'href="/teams/vision/"' not in other
