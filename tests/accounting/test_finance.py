"""Finance sees every team's usage and cost, and nothing else: no other team's jobs, no governance."""

import pytest
from django.contrib.auth.models import Group

from tests.factories import UserFactory

pytestmark = pytest.mark.django_db
URL = "/api/v1/usage/"


@pytest.fixture
def fiona(cluster):
    user = UserFactory(username="fiona")
    user.groups.add(Group.objects.get_or_create(name="finance")[0])
    return user


def test_finance_sees_every_teams_usage(api, fiona, usage):
    data = api(fiona).get(URL, {"start": "2026-11-01", "end": "2026-11-30", "group_by": "team"}).json()
    assert {r["group"] for r in data["results"]} == {"vision", "nlp"}
    assert api(fiona).get(URL, {"start": "2026-11-01", "end": "2026-11-30", "team": "vision"}).status_code == 200


def test_finance_sees_no_jobs_and_governs_nothing(api, fiona, alice, client):
    from scheduler.services.jobs import job_submit

    job = job_submit(user=alice, name="private", command="true", gpu_model="h100-80gb")
    assert api(fiona).get(f"/api/v1/jobs/{job.pk}/").status_code == 404
    client.force_login(fiona)
    assert client.get("/govern/quotas/").status_code == 404
    assert client.get("/accounting/").status_code == 200


def test_a_plain_member_still_sees_only_their_team(api, charlie, usage):
    data = api(charlie).get(URL, {"start": "2026-11-01", "end": "2026-11-30", "group_by": "team"}).json()
    assert {r["group"] for r in data["results"]} == {"nlp"}


def test_finance_reads_top_jobs_without_links_to_job_pages_it_cannot_open(client, fiona, alice, usage):
    client.force_login(fiona)
    html = client.get("/accounting/", {"preset": "custom", "start": "2026-11-01", "end": "2026-11-30"}).content.decode()
    assert "resnet" in html and "/jobs/" not in html
    client.force_login(alice)  # a member opens its own team's jobs from the same table
    html = client.get("/accounting/", {"preset": "custom", "start": "2026-11-01", "end": "2026-11-30"}).content.decode()
    assert "resnet</a>" in html
