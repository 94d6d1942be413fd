"""The navigation bar and home page fit the user: a finance user on no team gets accounting, not a jobs portal."""

import pytest
from django.contrib.auth.models import Group

from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def finance(cluster):
    user = UserFactory(username="fiona")
    user.groups.add(Group.objects.get_or_create(name="finance")[0])
    return user


def test_a_finance_user_on_no_team_lands_on_accounting_without_job_links(client, finance):
    client.force_login(finance)
    response = client.get("/")
    assert response.status_code == 302 and response.url == "/accounting/"
    page = client.get("/accounting/").content.decode()
    assert 'href="/accounting/"' in page and 'href="/jobs/new/"' not in page and 'href="/jobs/"' not in page


def test_a_team_member_keeps_the_jobs_portal_even_in_the_finance_group(client, finance, alice):
    MembershipFactory(user=finance, team=alice.memberships.first().team)
    client.force_login(finance)
    response = client.get("/")
    assert response.status_code == 200 and 'href="/jobs/new/"' in response.content.decode()
    client.force_login(alice)
    assert 'href="/jobs/new/"' in client.get("/accounting/").content.decode()


def test_every_page_names_its_icon_and_the_icon_is_a_shipped_static_file(client, alice):
    from django.contrib.staticfiles import finders

    client.force_login(alice)
    assert '<link rel="icon" href="/static/favicon.svg"' in client.get("/").content.decode()
    assert finders.find("favicon.svg")


def test_favicon_ico_leads_to_the_shipped_icon_without_a_login(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 301 and response.url == "/static/favicon.svg"
