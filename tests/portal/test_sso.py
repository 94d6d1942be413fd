"""Single sign-on through a real OpenID Connect provider (``tests/sso/provider.py``, its own process on
loopback): the portal redirects to it, the person signs in there, the provider redirects back with a code,
and the portal exchanges the code, checks the RS256 ID token against the provider's keys and reads the
userinfo, all over HTTP. Users are created at first sign-in; their groups give teams and roles by the rules
platform admins edit in Govern; groups that match no rule give no team."""

from urllib.parse import parse_qsl, urlparse

import pytest
import requests
from django.test import Client

from portal.models import AuditEntry, Membership, SsoGroupRule
from scheduler.services.jobs import job_submit
from tests.sso.process import configure, running_provider

pytestmark = pytest.mark.django_db
PORT = 8061  # this worktree's loopback range
ISSUER = f"http://127.0.0.1:{PORT}"
USERS = {
    "erin": {"password": "erin-pw", "email": "erin@example.com", "name": "Erin",
             "groups": ["vision-users", "vision-leads"]},
    "zed": {"password": "zed-pw", "email": "zed@example.com", "groups": ["marketing"]},
    "olga": {"password": "olga-pw", "email": "olga@example.com", "groups": ["platform-ops"]},
}


@pytest.fixture(scope="module")
def provider(tmp_path_factory):
    """The provider process, started for this module and stopped after it."""
    with running_provider(PORT, USERS, tmp_path_factory.mktemp("idp")) as issuer:
        yield issuer


@pytest.fixture
def sso(provider, settings, cluster):
    """Single sign-on on, configured from the provider's discovery document, with rules for vision."""
    configure(settings, provider)
    SsoGroupRule.objects.create(group="vision-users", team=cluster["vision"], role="member")
    SsoGroupRule.objects.create(group="vision-leads", team=cluster["vision"], role="team-admin")
    SsoGroupRule.objects.create(group="platform-ops", team=None, role="platform-admin")
    return provider


def sign_in(client: Client, username: str, password: str):
    """The browser's round trip: to the provider, its sign-in form, back to the portal with the code."""
    start = client.get("/oidc/authenticate/")
    assert start.status_code == 302 and start["Location"].startswith(ISSUER + "/authorize?")
    query = dict(parse_qsl(urlparse(start["Location"]).query))
    assert requests.get(start["Location"], timeout=5).status_code == 200  # the provider's sign-in form
    answer = requests.post(f"{ISSUER}/authorize", data={**query, "username": username, "password": password},
                           allow_redirects=False, timeout=5)
    if answer.status_code != 302:
        return answer
    back = urlparse(answer.headers["Location"])
    assert f"{back.scheme}://{back.netloc}" == "http://testserver"
    return client.get(f"{back.path}?{back.query}")


def test_a_first_sign_in_creates_the_user_in_the_teams_and_roles_its_groups_give(sso, cluster):
    client = Client()
    assert 'id="sso-login"' in client.get("/login/").content.decode()
    done = sign_in(client, "erin", "erin-pw")
    assert done.status_code == 302 and done["Location"] == "/"
    membership = Membership.objects.get(user__username="erin")
    assert (membership.team.name, membership.role) == ("vision", "team-admin"), "the highest role of its groups"
    assert membership.user.email == "erin@example.com" and not membership.user.has_usable_password()
    page = client.get("/teams/vision/")
    assert page.status_code == 200 and 'id="members"' in page.content.decode(), "a team-admin manages members"
    actions = set(AuditEntry.objects.filter(actor=None).values_list("action", flat=True))
    assert {"user.create", "membership.create"} <= actions
    # The rules change: at the next sign-in erin's role follows them.
    SsoGroupRule.objects.filter(group="vision-leads").delete()
    sign_in(Client(), "erin", "erin-pw")
    assert Membership.objects.get(user__username="erin").role == "member"


def test_a_user_whose_groups_match_no_rule_sees_no_teams_data(sso, alice, cluster):
    job = job_submit(user=alice, name="secret-vision", command="true", gpu_model="h100-80gb")
    client = Client()
    assert sign_in(client, "zed", "zed-pw").status_code == 302
    assert not Membership.objects.filter(user__username="zed").exists()
    assert client.get("/teams/vision/").status_code == 404
    assert client.get(f"/jobs/{job.pk}/").status_code == 404
    assert "secret-vision" not in client.get("/jobs/").content.decode()


def test_a_platform_ops_group_makes_a_platform_admin(sso):
    client = Client()
    sign_in(client, "olga", "olga-pw")
    assert client.get("/govern/sso/").status_code == 200


def test_a_wrong_password_at_the_provider_or_a_forged_callback_signs_no_one_in(sso):
    client = Client()
    assert sign_in(client, "erin", "wrong").status_code == 401
    forged = client.get("/oidc/callback/?code=made-up&state=made-up")
    assert forged.status_code == 400, "a state this session never sent is refused"
    client.get("/oidc/authenticate/")  # a real state, but a code the provider never issued
    state = client.session["oidc_states"]
    refused = client.get(f"/oidc/callback/?code=made-up&state={next(iter(state))}")
    assert refused.status_code == 302 and "sso=failed" in refused["Location"]
    assert client.get("/teams/vision/").status_code == 302  # still signed out: to the login page


def test_local_passwords_can_be_kept_for_platform_admins_only(settings, alice, staff):
    for user in (alice, staff):
        user.set_password("local-pw-2026")
        user.save()
    settings.ROTA_LOCAL_LOGIN = "staff"
    refused = Client().post("/login/", {"username": "alice", "password": "local-pw-2026"})
    assert refused.status_code == 200 and "local passwords are for platform admins only" in refused.content.decode()
    assert Client().post("/login/", {"username": "root", "password": "local-pw-2026"}).status_code == 302
    settings.ROTA_LOCAL_LOGIN = "all"
    assert Client().post("/login/", {"username": "alice", "password": "local-pw-2026"}).status_code == 302


def test_while_sso_is_off_there_is_no_button_and_no_sso_route(client):
    assert 'id="sso-login"' not in client.get("/login/").content.decode()
    assert client.get("/oidc/authenticate/").status_code == 404
    assert client.get("/oidc/callback/?code=x&state=y").status_code == 404


def test_platform_admins_edit_the_rules_in_govern_with_a_reason(staff, cluster):
    client = Client()
    client.force_login(staff)
    assert "Single sign-on is off" in client.get("/govern/sso/").content.decode()
    bad = client.post("/govern/sso/", {"group": "nlp-users", "role": "platform-admin", "team": cluster["nlp"].pk,
                                       "reason": "x"})
    assert bad.status_code == 400 and not SsoGroupRule.objects.exists()
    ok = client.post("/govern/sso/", {"group": "nlp-users", "role": "member", "team": cluster["nlp"].pk,
                                      "reason": "nlp joins SSO"})
    assert ok.status_code == 302
    rule = SsoGroupRule.objects.get()
    assert client.post(f"/govern/sso/{rule.pk}/delete/", {"reason": "moved"}).status_code == 302
    entries = AuditEntry.objects.filter(object_type="sso_rule").order_by("id")
    assert list(entries.values_list("action", flat=True)) == ["sso_rule.create", "sso_rule.delete"]
