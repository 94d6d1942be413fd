"""Single sign-on in Chromium: the whole redirect flow through the real test OpenID Connect provider, from
the portal's sign-in page to the provider's form and back, landing in the team and role the groups give."""

import pytest

from portal.models import Membership, SsoGroupRule
from tests.browser.test_pages import browser_instance, page, shot  # noqa: F401 (fixtures)
from tests.sso.process import configure, running_provider

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PORT = 8062  # this worktree's loopback range (the test-client SSO tests use 8061)
USERS = {"erin": {"password": "erin-pw", "email": "erin@example.com", "groups": ["vision-leads"]},
         "zed": {"password": "zed-pw", "email": "zed@example.com", "groups": ["marketing"]}}


@pytest.fixture
def sso(settings, cluster, tmp_path):
    with running_provider(PORT, USERS, tmp_path) as issuer:
        configure(settings, issuer)
        SsoGroupRule.objects.create(group="vision-leads", team=cluster["vision"], role="team-admin")
        yield issuer


def sso_sign_in(page, username, password):  # noqa: F811 (page is the fixture)
    page.goto("/login/")
    page.click("#sso-login")
    page.wait_for_url(f"http://127.0.0.1:{PORT}/authorize*")
    page.fill("#username", username)
    page.fill("#password", password)
    page.click("#signin")


def test_a_person_signs_in_through_the_provider_and_lands_in_the_team_its_groups_give(sso, page):  # noqa: F811
    sso_sign_in(page, "erin", "erin-pw")
    page.wait_for_url("**/")
    page.goto("/teams/vision/")
    assert page.locator("#members").is_visible(), "team-admin of vision: manages its members"
    assert Membership.objects.get(user__username="erin").role == "team-admin"
    shot(page, "sso-team")


def test_a_person_whose_groups_match_no_rule_sees_no_team(sso, page):  # noqa: F811
    sso_sign_in(page, "zed", "zed-pw")
    page.wait_for_url("**/")
    assert page.goto("/teams/vision/").status == 404
