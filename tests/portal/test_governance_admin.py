"""Platform administration in the portal: a platform admin creates a team in the department tree, a pool
and a GPU model, adds a member, and the member submits to the new pool; every change is in the audit log.
Team-admins manage their own team's members only; everyone else gets 404."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django.utils import timezone

from accounting.models import RateCard
from accounting.services_billing import rate_card_create
from portal.models import AuditEntry, Membership, Team
from scheduler.cycle import run_cycle
from scheduler.models import GpuModel, Pool, Quota
from scheduler.services.jobs import job_submit
from scheduler.services.quote import job_quote
from tests.factories import GpuFactory, NodeFactory, UserFactory

pytestmark = pytest.mark.django_db


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_platform_admin_builds_a_team_pool_model_and_member_in_the_portal(staff, cluster):
    admin = client_for(staff)
    research = Team.objects.create(name="research")
    made = admin.post("/govern/teams/", {"name": "speech", "display_name": "Speech", "parent": research.pk,
                                         "reason": "new group"})
    assert made.status_code == 302, made.content.decode()[:2000]
    speech = Team.objects.get(name="speech")
    assert speech.parent == research and "speech" in admin.get("/govern/teams/").content.decode()
    rate_card_create(version=1, effective_from=timezone.now() - timedelta(days=1), currency="EUR",
                     prices={"h100-80gb": Decimal("4.10"), "a100-40gb": Decimal("2.00")})
    old_prices = {"h100-80gb": Decimal("4.10"), "a100-40gb": Decimal("2.00")}
    assert admin.post("/govern/gpu-models/", {"name": "l40s-48gb", "vendor": "nvidia", "memory_mb": "49152",
                                              "price_per_gpu_hour": "2.75", "reason": "new nodes"}).status_code == 302
    # Its price is a new rate card version from now, every other model keeping its price.
    card = RateCard.objects.order_by("-version").first()
    prices = dict(card.entries.values_list("gpu_model__name", "price_per_gpu_hour"))
    assert prices == {**old_prices, "l40s-48gb": Decimal("2.75")} and (card.version, card.currency) == (2, "EUR")
    assert "2.7500" in admin.get("/govern/gpu-models/").content.decode()
    assert admin.post("/govern/pools/new/", {"name": "infer", "description": "L40S", "teams": [speech.pk],
                                             "reason": "for speech"}).status_code == 302
    pool, l40s = Pool.objects.get(name="infer"), GpuModel.objects.get(name="l40s-48gb")
    assert list(pool.teams.all()) == [speech]
    node = NodeFactory(name="node-l40s", pool=pool)
    GpuFactory(node=node, index=0, model=l40s, memory_mb=49152, uuid="GPU-l40s-0")
    Quota.objects.create(team=speech, gpu_model=l40s, guaranteed=1, limit=1)
    dana = UserFactory(username="dana")
    assert admin.post("/teams/speech/members/", {"username": "dana", "role": "member"}).status_code == 302
    assert Membership.objects.get(user=dana).team == speech
    job = job_submit(user=dana, name="first", command="true", pool="infer", gpu_model="l40s-48gb")
    run_cycle()
    job.refresh_from_db()
    assert job.state == "admitted" and job.allocations.get().node == node
    actions = set(AuditEntry.objects.values_list("action", flat=True))
    assert {"team.create", "gpu_model.create", "rate_card.create", "pool.create", "membership.create"} <= actions
    assert job_quote(user=dana, name="next", command="true", pool="infer", gpu_model="l40s-48gb")["hourly_cost"] \
        == Decimal("2.75")
    entry = AuditEntry.objects.get(action="team.create")
    assert entry.after == {"name": "speech", "display_name": "Speech", "parent": "research"}
    assert entry.actor_name == "root" and entry.reason == "new group"


def test_team_edits_keep_the_tree_a_tree_and_need_a_reason(staff, cluster):
    admin = client_for(staff)
    vision, nlp = cluster["vision"], cluster["nlp"]
    Team.objects.filter(pk=nlp.pk).update(parent=vision)
    loop = admin.post("/govern/teams/vision/", {"name": "vision", "parent": nlp.pk, "reason": "reorg"})
    assert loop.status_code == 400 and "parent" in loop.content.decode()
    unexplained = admin.post("/govern/teams/vision/", {"name": "vision", "display_name": "Vision", "reason": ""})
    assert unexplained.status_code == 400 and "a reason is required" in unexplained.content.decode()
    bad = admin.post("/govern/teams/", {"name": "Not A Slug!", "reason": "x"})
    assert bad.status_code == 400 and not Team.objects.filter(name="Not A Slug!").exists()
    renamed = admin.post("/govern/teams/vision/", {"name": "vision", "display_name": "Vision", "reason": "label"})
    assert renamed.status_code == 302
    entry = AuditEntry.objects.get(action="team.update")
    assert entry.before["display_name"] == "" and entry.after["display_name"] == "Vision"


def test_only_platform_admins_administer_and_team_admins_manage_their_own_members(alice, cluster):
    client = client_for(alice)
    for url in ("/govern/teams/", "/govern/teams/vision/", "/govern/gpu-models/", "/govern/pools/new/"):
        assert client.get(url).status_code == 404, url
    assert client.post("/govern/teams/", {"name": "mine", "reason": "x"}).status_code == 404
    assert not Team.objects.filter(name="mine").exists()
    Membership.objects.filter(user=alice).update(role=Membership.TEAM_ADMIN)
    UserFactory(username="erin")
    assert client.post("/teams/vision/members/", {"username": "erin", "role": "member"}).status_code == 302
    assert client.post("/teams/nlp/members/", {"username": "erin", "role": "member"}).status_code == 404
    assert list(Membership.objects.filter(user__username="erin").values_list("team__name", flat=True)) == ["vision"]


def test_a_gpu_model_with_a_bad_price_is_refused_and_nothing_is_saved(staff, cluster):
    answer = client_for(staff).post("/govern/gpu-models/", {"name": "l4-24gb", "vendor": "nvidia",
                                                            "memory_mb": "24576", "price_per_gpu_hour": "-1",
                                                            "reason": "new nodes"})
    assert answer.status_code == 400 and "greater than or equal to 0" in answer.content.decode()
    assert not GpuModel.objects.filter(name="l4-24gb").exists() and not RateCard.objects.exists()
