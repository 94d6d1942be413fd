"""CSV import of users and memberships: the dry run shows each line's change and changes nothing; the import
applies them all in one go (audited) or, with one bad line, none; only platform admins import."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from portal.models import AuditEntry, Membership

pytestmark = pytest.mark.django_db
URL = "/govern/members-import/"
GOOD = """username,email,team,role
alice,alice@example.com,vision,team-admin
fay,fay@example.com,nlp,member
fay,fay@example.com,vision,member
"""


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_dry_run_shows_each_lines_change_and_changes_nothing(staff, alice):
    page = client_for(staff).post(URL, {"text": GOOD, "action": "dry-run"})
    assert page.status_code == 200
    text = page.content.decode()
    assert "member -&gt; team-admin in vision" in text and "new user, joins nlp as member" in text
    assert "joins vision as member" in text
    assert not Membership.objects.filter(user__username="fay").exists()
    assert Membership.objects.get(user=alice).role == "member"


def test_the_import_applies_every_line_audited_and_new_users_have_no_password(staff, alice):
    file = SimpleUploadedFile("members.csv", GOOD.encode(), content_type="text/csv")
    done = client_for(staff).post(URL, {"file": file, "action": "apply", "reason": "quarterly sync"})
    assert done.status_code == 302
    assert Membership.objects.get(user=alice).role == "team-admin"
    fay = sorted(Membership.objects.filter(user__username="fay").values_list("team__name", "role"))
    assert fay == [("nlp", "member"), ("vision", "member")]
    assert not Membership.objects.get(user__username="fay", team__name="nlp").user.has_usable_password()
    actions = sorted(AuditEntry.objects.values_list("action", flat=True))
    assert actions == ["membership.create", "membership.create", "membership.update", "user.create"]
    assert set(AuditEntry.objects.values_list("reason", flat=True)) == {"quarterly sync"}


def test_one_bad_line_and_nothing_is_applied_with_every_bad_line_named(staff, alice):
    bad = GOOD + "Bad Name!,x,mars,boss\nfay,fay@example.com,nlp,member\n"
    response = client_for(staff).post(URL, {"text": bad, "action": "apply", "reason": "sync"})
    text = response.content.decode()
    assert response.status_code == 400
    assert "line 5" in text and "no team named" in text and "role must be member or team-admin" in text
    assert "already on line 3" in text
    assert not Membership.objects.filter(user__username="fay").exists() and not AuditEntry.objects.exists()
    header = client_for(staff).post(URL, {"text": "user,team\nx,y\n", "action": "dry-run"})
    assert header.status_code == 400 and "the first line must be the header" in header.content.decode()
    unexplained = client_for(staff).post(URL, {"text": GOOD, "action": "apply", "reason": ""})
    assert unexplained.status_code == 400 and "a reason is required" in unexplained.content.decode()


def test_only_platform_admins_import(alice):
    Membership.objects.filter(user=alice).update(role="team-admin")
    assert client_for(alice).post(URL, {"text": GOOD, "action": "apply", "reason": "x"}).status_code == 404
    assert not Membership.objects.filter(user__username="fay").exists()
