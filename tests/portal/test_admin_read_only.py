"""The Django admin cannot change what the audited governance services own (quotas, priority classes,
pool access, node state, GPU health, memberships) nor what the scheduler owns (jobs, allocations)."""

import pytest

from scheduler.models import PriorityClass, Quota
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def root(client, cluster):
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    return client


def test_quotas_and_priority_classes_are_view_only(root, cluster):
    quota = Quota.objects.first()
    assert root.get(f"/admin/scheduler/quota/{quota.pk}/change/").status_code == 200  # still viewable
    before = (quota.guaranteed, quota.limit)
    response = root.post(f"/admin/scheduler/quota/{quota.pk}/change/",
                         {"team": quota.team_id, "gpu_model": quota.gpu_model_id, "guaranteed": "999",
                          "limit": "999", "weight": "1", "non_lendable": "0"})
    assert response.status_code == 403
    quota.refresh_from_db()
    assert (quota.guaranteed, quota.limit) == before
    assert root.get("/admin/scheduler/quota/add/").status_code == 403
    pc = PriorityClass.objects.first()
    assert root.post(f"/admin/scheduler/priorityclass/{pc.pk}/delete/", {"post": "yes"}).status_code == 403
    assert PriorityClass.objects.filter(pk=pc.pk).exists()
    for model in ("job", "allocation"):
        assert root.get(f"/admin/scheduler/{model}/add/").status_code == 403


def test_pool_access_and_node_state_are_shown_not_edited(root, cluster):
    from scheduler.models import Node, Pool

    pool = Pool.objects.first()
    page = root.get(f"/admin/scheduler/pool/{pool.pk}/change/").content.decode()
    assert 'name="teams"' not in page and 'name="allowed_images"' not in page  # Govern -> Images checks them
    node = Node.objects.first()
    page = root.get(f"/admin/scheduler/node/{node.pk}/change/").content.decode()
    assert 'name="state"' not in page and 'name="gpus-0-healthy"' not in page
    assert 'name="executor"' not in page and 'name="executor_info"' not in page  # what its agent reported
    page = root.get(f"/admin/portal/team/{cluster['vision'].pk}/change/").content.decode()
    assert 'name="unix_id"' not in page and str(cluster["vision"].unix_id) in page


def test_what_the_django_admin_changes_lands_in_the_audit_log(root, cluster):
    from portal.models import AuditEntry
    from scheduler.models import Node, Pool

    assert root.post("/admin/scheduler/pool/add/", {"name": "robo", "description": "robotics"}).status_code == 302
    robo = Pool.objects.get(name="robo")
    node = Node.objects.get(name="node-a100")
    page = root.get(f"/admin/scheduler/node/{node.pk}/change/")
    data = {k: v for k, v in page.context["adminform"].form.initial.items() if v is not None}
    data |= {"pool": robo.pk, "labels": "{}", "gpus-TOTAL_FORMS": "0", "gpus-INITIAL_FORMS": "0"}
    assert root.post(f"/admin/scheduler/node/{node.pk}/change/", data).status_code == 302
    created, moved = AuditEntry.objects.order_by("id")
    assert (created.action, created.object_name, created.before) == ("pool.create", "robo", None)
    assert created.actor_name == "root" and created.reason == "Django admin"
    assert moved.action == "node.update" and moved.before == {"pool": "train"} and moved.after == {"pool": "robo"}


def test_a_team_cannot_be_moved_in_the_admin_under_a_parent_its_guarantees_would_overflow_or_into_a_loop(
        root, cluster):
    from portal.models import AuditEntry
    from tests.factories import QuotaFactory, TeamFactory

    research = TeamFactory(name="research")
    QuotaFactory(team=research, gpu_model=cluster["h100"], guaranteed=2, limit=8)
    vision = cluster["vision"]  # guaranteed 2 h100

    def move(team, parent):
        return root.post(f"/admin/portal/team/{team.pk}/change/", {
            "name": team.name, "display_name": "", "parent": parent.pk,
            "memberships-TOTAL_FORMS": "0", "memberships-INITIAL_FORMS": "0"})

    assert move(vision, research).status_code == 302  # 2 of research's 2
    vision.refresh_from_db()
    assert vision.parent == research
    refused = move(cluster["nlp"], research)  # 2 + 1 > 2
    assert refused.status_code == 200 and "h100-80gb: research&#x27;s children would be guaranteed 3 GPUs" in (
        refused.content.decode())
    loop = move(research, vision)
    assert loop.status_code == 200 and "the team tree cannot loop" in loop.content.decode()
    assert [e.action for e in AuditEntry.objects.all()] == ["team.update"]


def test_granting_platform_admin_in_the_django_admin_is_audited(root, alice):
    from portal.models import AuditEntry

    page = root.get(f"/admin/auth/user/{alice.pk}/change/")
    form = page.context["adminform"].form
    data = {k: v for k, v in form.initial.items() if v is not None and k not in ("groups", "user_permissions",
                                                                                 "password")}
    alice.date_joined = alice.date_joined.replace(microsecond=0)
    alice.save(update_fields=["date_joined"])
    data |= {"is_staff": "on", "date_joined_0": f"{alice.date_joined:%Y-%m-%d}",
             "date_joined_1": f"{alice.date_joined:%H:%M:%S}"}
    data.pop("last_login", None)
    assert root.post(f"/admin/auth/user/{alice.pk}/change/", data).status_code == 302
    entry = AuditEntry.objects.get()
    assert entry.action == "user.update" and entry.before == {"is_staff": False} and entry.after == {"is_staff": True}


def test_a_new_rate_card_and_its_prices_are_audited(root, cluster):
    from portal.models import AuditEntry

    response = root.post("/admin/accounting/ratecard/add/", {
        "version": "7", "name": "2027", "effective_from_0": "2027-01-01", "effective_from_1": "00:00:00",
        "currency": "EUR", "notes": "", "entries-TOTAL_FORMS": "1", "entries-INITIAL_FORMS": "0",
        "entries-0-gpu_model": cluster["h100"].pk, "entries-0-price_per_gpu_hour": "3.5000"})
    assert response.status_code == 302
    entry = AuditEntry.objects.get()
    assert entry.action == "ratecard.create" and entry.after["prices"] == {"h100-80gb": "3.5000"}
    assert entry.after["currency"] == "EUR"


def test_moving_a_team_without_a_guarantee_under_an_overflowing_parent_is_not_its_problem(root, cluster):
    from tests.factories import QuotaFactory, TeamFactory

    research = TeamFactory(name="research")
    QuotaFactory(team=research, gpu_model=cluster["h100"], guaranteed=1, limit=8)
    TeamFactory(name="old", parent=research)
    QuotaFactory(team=research.children.get(), gpu_model=cluster["h100"], guaranteed=3, limit=4)  # old overflow
    newcomer = TeamFactory(name="newcomer")
    response = root.post(f"/admin/portal/team/{newcomer.pk}/change/", {
        "name": "newcomer", "display_name": "", "parent": research.pk,
        "memberships-TOTAL_FORMS": "0", "memberships-INITIAL_FORMS": "0"})
    assert response.status_code == 302  # it adds no guarantee
    refused = root.post("/admin/portal/team/add/", {"name": "vision2", "display_name": "", "parent": research.pk,
                                                    "memberships-TOTAL_FORMS": "0", "memberships-INITIAL_FORMS": "0"})
    assert refused.status_code == 302, "a new team has no quota yet"


def test_two_admins_saving_at_once_each_get_their_own_before(cluster):
    """One ModelAdmin serves every request: a value kept on it between save_model and save_related would be
    another request's."""
    from django.contrib.admin.sites import site
    from django.test import RequestFactory

    from portal.models import AuditEntry, Team
    from tests.factories import UserFactory

    admin = site._registry[Team]
    root = UserFactory(username="root2", is_staff=True, is_superuser=True)
    requests = []
    for team, new_name in ((cluster["vision"], "vision-x"), (cluster["nlp"], "nlp-x")):
        request = RequestFactory().post("/")
        request.user = root
        form = admin.get_form(request, team)(instance=team, data={"name": new_name, "display_name": ""})
        assert form.is_valid(), form.errors
        requests.append((request, form))
    for request, form in requests:  # both save before either records
        admin.save_model(request, form.save(commit=False), form, True)
    for request, form in requests:
        admin.save_related(request, form, [], True)
    entries = {e.after["name"]: e.before["name"] for e in AuditEntry.objects.all()}
    assert entries == {"vision-x": "vision", "nlp-x": "nlp"}


def test_a_bulk_delete_in_the_admin_is_all_or_nothing(root, cluster, alice):
    from django.contrib.admin.sites import site
    from django.contrib.auth import get_user_model
    from django.db.models import ProtectedError
    from django.test import RequestFactory

    from portal.models import Team
    from scheduler.services.jobs import job_submit
    from tests.factories import TeamFactory

    spare = TeamFactory(name="aaa-spare")
    job_submit(user=alice, name="keeps-vision", command="true")  # a team with jobs cannot be deleted
    request = RequestFactory().post("/")
    request.user = get_user_model().objects.get(username="root")
    with pytest.raises(ProtectedError):
        site._registry[Team].delete_queryset(request, Team.objects.filter(name__in=["aaa-spare", "vision"]))
    assert Team.objects.filter(pk=spare.pk).exists(), "the first deletion was rolled back with the failed one"


def test_a_password_change_in_the_admin_is_audited_without_the_password(root, alice):
    from portal.models import AuditEntry

    response = root.post(f"/admin/auth/user/{alice.pk}/password/",
                         {"password1": "Another-horse-77", "password2": "Another-horse-77", "usable_password": "true"})
    assert response.status_code == 302
    entry = AuditEntry.objects.get()
    assert entry.action == "user.password" and entry.object_name == "alice" and entry.after is None


def test_the_usage_ledger_and_the_inventory_history_cannot_be_deleted_by_hand(root, cluster, alice):
    from datetime import timedelta

    from accounting.models import GpuPresence, UsageRecord
    from accounting.services import usage_rollup
    from tests.accounting.helpers import T0, allocate, make_job

    allocate(make_job(alice, cluster["vision"]), "GPU-h100-0", T0, T0 + timedelta(hours=2))
    usage_rollup(until=T0 + timedelta(hours=3))
    row, presence = UsageRecord.objects.first(), GpuPresence.objects.first()
    assert root.get(f"/admin/accounting/usagerecord/{row.pk}/change/").status_code == 200  # still viewable
    assert root.post(f"/admin/accounting/usagerecord/{row.pk}/delete/", {"post": "yes"}).status_code == 403
    assert root.post(f"/admin/accounting/gpupresence/{presence.pk}/delete/", {"post": "yes"}).status_code == 403
    bulk = root.post("/admin/accounting/usagerecord/", {"action": "delete_selected", "_selected_action": [row.pk],
                                                         "post": "yes"})
    assert bulk.status_code in (200, 302, 403)
    assert UsageRecord.objects.filter(pk=row.pk).exists() and GpuPresence.objects.filter(pk=presence.pk).exists()
