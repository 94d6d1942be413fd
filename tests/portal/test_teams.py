"""The team dashboard: quota standing (in use, borrowed, lent), fair share like sshare, running and pending
work, recent failures, members managed by team-admins only; outsiders get 404; the share API."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from portal.models import AuditEntry, Membership, Team
from portal.teams.selectors import quota_standing, share_standing
from scheduler.cycle import run_cycle
from scheduler.models import Allocation, Job
from scheduler.services.common import db_now
from scheduler.services.jobs import job_submit
from tests.factories import MembershipFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db


def client_for(user=None) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


@pytest.fixture
def vision_admin(cluster):
    user = UserFactory(username="victor")
    MembershipFactory(user=user, team=cluster["vision"], role=Membership.TEAM_ADMIN)
    return user


def submit(user, **kw):
    return job_submit(user=user, **{"name": "train", "command": "python train.py", "gpu_model": "h100-80gb", **kw})


def by_model(rows):
    return {r.gpu_model: r for r in rows}


def test_it_shows_the_dashboard_to_members(alice):
    page = client_for(alice).get("/teams/vision/").content.decode()
    assert "Quota per GPU model" in page and "Fair share" in page and "h100-80gb" in page
    assert "Running and pending work" in page and "Recent failures" in page


def test_it_shows_the_uid_the_teams_jobs_run_as(alice, cluster):
    page = client_for(alice).get("/teams/vision/").content.decode()
    assert f"run on the nodes as uid and gid {cluster['vision'].unix_id}" in page


def test_it_hides_another_teams_dashboard_with_404(alice, charlie):
    assert client_for(charlie).get("/teams/vision/").status_code == 404
    assert client_for(charlie).get("/teams/no-such-team/").status_code == 404


def test_platform_admins_see_every_team(cluster):
    staff = UserFactory(username="root", is_staff=True)
    assert client_for(staff).get("/teams/nlp/").status_code == 200


def test_anonymous_visitors_are_sent_to_sign_in(cluster):
    response = client_for().get("/teams/vision/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_the_home_page_links_to_the_team_dashboard(alice):
    assert 'href="/teams/vision/"' in client_for(alice).get("/").content.decode()


def test_the_teams_index_goes_straight_to_a_single_team(alice):
    response = client_for(alice).get("/teams/")
    assert response.status_code == 302 and response.url == "/teams/vision/"


def test_borrowing_and_lending_are_counted_per_gpu_model(alice, charlie, cluster):
    submit(alice, gpus=3)  # vision: guaranteed 2, limit 4 -> borrows 1 of nlp's idle guarantee
    run_cycle()
    assert Job.objects.get().state == "admitted"
    vision = by_model(quota_standing(team=cluster["vision"]))
    nlp = by_model(quota_standing(team=cluster["nlp"]))
    assert vision["h100-80gb"].in_use == 3 and vision["h100-80gb"].borrowed == 1 and vision["h100-80gb"].lent == 0
    assert nlp["h100-80gb"].in_use == 0 and nlp["h100-80gb"].borrowed == 0 and nlp["h100-80gb"].lent == 1
    assert vision["a100-40gb"].in_use == 0 and vision["a100-40gb"].lent == 0
    page = client_for(alice).get("/teams/vision/").content.decode()
    assert "train" in page and "admitted" in page


def test_fair_share_factor_is_half_on_target_and_lower_above_it(alice, charlie, cluster):
    now = db_now()
    idle = share_standing(team=cluster["vision"], now=now).team
    assert idle.raw_usage == 0 and idle.fair_share == 1.0
    assert idle.entitlement == 3.0  # 2 h100 + 1 a100 guaranteed
    submit(alice, gpus=2)
    run_cycle()
    Job.objects.update(started_at=now)
    Allocation.objects.update(started_at=now - timedelta(hours=1))
    later = db_now()
    vision = share_standing(team=cluster["vision"], now=later)
    nlp = share_standing(team=cluster["nlp"], now=later)
    assert vision.team.raw_usage == pytest.approx(2 * 3600, rel=0.01)
    assert vision.team.norm_usage == pytest.approx(1.0)
    assert vision.team.norm_shares == pytest.approx(0.75)  # 3 of 4 entitled GPUs
    assert vision.team.fair_share == pytest.approx(2 ** (-1 / 0.75))
    assert nlp.team.fair_share == 1.0 and nlp.team.rank == 1 and vision.team.rank == 2
    assert idle.rank == 1  # teams without usage tie for first
    # A department only caps its children: it is not one of the teams ranked.
    dept = TeamFactory(name="research")
    Team.objects.filter(pk__in=[cluster["vision"].pk, cluster["nlp"].pk]).update(parent=dept)
    ranked = share_standing(team=cluster["vision"], now=later)
    assert (ranked.team.rank, ranked.teams) == (2, 2)
    Allocation.objects.update(started_at=db_now() - timedelta(minutes=7))  # 2 GPUs × 7 min = 0.23 GPU-h
    page = client_for(alice).get("/teams/vision/").content.decode()
    assert "(≈ 0.23 GPU-h)" in page  # not "≈ 0", as a whole-hour rounding said


def test_pending_work_shows_its_reason_and_failures_are_listed(alice, cluster):
    submit(alice, gpus=4)
    run_cycle()
    waiting = submit(alice, name="waits", gpus=2)
    failed = submit(alice, name="broke")
    Job.objects.filter(pk=failed.pk).update(state="failed", exit_code=3, failure_class="user", finished_at=db_now())
    run_cycle()
    page = client_for(alice).get("/teams/vision/").content.decode()
    waiting.refresh_from_db()
    assert waiting.pending_reason_code and waiting.pending_reason_code in page
    failures = page.split("Recent failures", 1)[1]
    assert "broke" in failures and "user" in failures


def test_the_dashboard_runs_a_fixed_number_of_queries(alice, cluster):
    client = client_for(alice)
    submit(alice)
    client.get("/teams/vision/")
    with CaptureQueriesContext(connection) as few:
        assert client.get("/teams/vision/").status_code == 200
    for i in range(8):
        submit(alice, name=f"more-{i}")
    job = submit(alice, name="failed")
    Job.objects.filter(pk=job.pk).update(state="failed", finished_at=db_now())
    run_cycle()
    with CaptureQueriesContext(connection) as many:
        assert client.get("/teams/vision/").status_code == 200
    assert len(many) == len(few), [q["sql"] for q in many]
    assert len(many) <= 20, [q["sql"][:150] for q in many]  # 20: the active policy and the lost work credited


def test_members_do_not_see_or_use_member_management(alice, bob):
    page = client_for(alice).get("/teams/vision/").content.decode()
    assert "Add or change role" not in page and "bob" not in page
    promote = {"username": "alice", "role": "team-admin"}
    assert client_for(alice).post("/teams/vision/members/", promote).status_code == 404
    assert client_for(alice).post("/teams/vision/members/bob/remove/").status_code == 404
    assert Membership.objects.get(user=alice).role == "member"
    assert not AuditEntry.objects.exists()


def test_outsiders_cannot_manage_members(charlie, bob):
    join = {"username": "charlie", "role": "member"}
    assert client_for(charlie).post("/teams/vision/members/", join).status_code == 404
    assert client_for(charlie).post("/teams/vision/members/bob/remove/").status_code == 404
    assert not Membership.objects.filter(user=charlie, team__name="vision").exists()


def test_a_team_admin_adds_changes_and_removes_members_with_audit(vision_admin, alice, charlie):
    client = client_for(vision_admin)
    page = client.get("/teams/vision/").content.decode()
    assert "Add or change role" in page and "alice" in page
    response = client.post("/teams/vision/members/", {"username": "charlie", "role": "member"})
    assert response.status_code == 302
    assert Membership.objects.filter(user=charlie, team__name="vision", role="member").exists()
    client.post("/teams/vision/members/", {"username": "alice", "role": "team-admin"})
    assert Membership.objects.get(user=alice).role == "team-admin"
    client.post("/teams/vision/members/charlie/remove/")
    assert not Membership.objects.filter(user=charlie, team__name="vision").exists()
    actions = list(AuditEntry.objects.order_by("id").values_list("action", "object_name", "actor_name"))
    assert actions == [("membership.create", "vision/charlie", "victor"),
                       ("membership.update", "vision/alice", "victor"),
                       ("membership.delete", "vision/charlie", "victor")]
    assert AuditEntry.objects.get(action="membership.update").before == {"role": "member"}


def test_bad_member_input_is_explained_inline(vision_admin):
    response = client_for(vision_admin).post("/teams/vision/members/", {"username": "nobody", "role": "owner"})
    assert response.status_code == 400
    body = response.content.decode()
    assert "owner is not one of the available choices" in body
    response = client_for(vision_admin).post("/teams/vision/members/", {"username": "nobody", "role": "member"})
    assert "no user named &#x27;nobody&#x27;" in response.content.decode()
    assert not AuditEntry.objects.exists()


def test_the_last_team_admin_cannot_leave_or_be_demoted(vision_admin):
    client = client_for(vision_admin)
    client.post("/teams/vision/members/victor/remove/")
    assert Membership.objects.filter(user=vision_admin, role="team-admin").exists()
    response = client.post("/teams/vision/members/", {"username": "victor", "role": "member"})
    assert response.status_code == 400 and "last team-admin" in response.content.decode()


def test_the_share_api_answers_members_and_404s_outsiders(alice, charlie, api):
    body = api(alice).get("/api/v1/teams/vision/share/").json()
    assert body["share"]["team"] == "vision" and body["share"]["fair_share"] == 1.0
    assert body["share"]["entitlement"] == 3.0 and body["teams"] == 2
    assert {q["gpu_model"] for q in body["quotas"]} == {"h100-80gb", "a100-40gb"}
    assert api(charlie).get("/api/v1/teams/vision/share/").status_code == 404
    assert api(charlie).get("/api/v1/teams/missing/share/").status_code == 404
    assert api().get("/api/v1/teams/vision/share/").status_code in (401, 403)
