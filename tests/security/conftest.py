"""Principals and tenant-owned objects for the authorization matrix: owner (alice), team-mate (bob),
outsider (charlie, another team), team-admin (dora, vision), platform admin (root), anonymous, node."""

from datetime import date, timedelta

import pytest
from django.test import Client
from django.utils import timezone

from accounting.models import Budget, Statement
from portal.models import Membership
from scheduler.models import NodeToken, QuotaLoan
from scheduler.models.templates import JobTemplate
from scheduler.services.arrays import array_submit
from scheduler.services.jobs import job_submit
from tests.factories import MembershipFactory, TeamFactory, UserFactory

PRINCIPALS = ("owner", "mate", "outsider", "team_admin", "platform_admin", "anonymous", "node")


@pytest.fixture
def world(cluster, alice, bob, charlie):
    dora = UserFactory(username="dora")
    MembershipFactory(user=dora, team=cluster["vision"], role=Membership.TEAM_ADMIN)
    root = UserFactory(username="root", is_staff=True, is_superuser=True)
    _, node_token = NodeToken.issue(cluster["nodes"][0])
    users = {"owner": alice, "mate": bob, "outsider": charlie, "team_admin": dora, "platform_admin": root}
    job = job_submit(user=alice, name="secret-vision-job", command="echo vision-only", gpu_model="h100-80gb")
    template = JobTemplate.objects.create(team=cluster["vision"], name="vision-template", fields={"gpus": 1})
    statement = Statement.objects.create(team=cluster["vision"], month=date(2026, 1, 1), format="pdf",
                                         content=b"%PDF-1.4 vision", size=15)
    budget = Budget.objects.create(team=cluster["vision"], unit=Budget.MONEY, amount=100)
    # A quota loan of vision's to a team the outsider (nlp) is not in.
    loan = QuotaLoan.objects.create(lender=cluster["vision"], borrower=TeamFactory(name="speech"),
                                    gpu_model=cluster["h100"], gpus=1, starts_at=timezone.now(),
                                    ends_at=timezone.now() + timedelta(hours=1), reason="secret deadline",
                                    requested_by=alice)
    job_array = array_submit(user=alice, array="0-1", name="secret-vision-array", command="echo vision-only",
                             gpu_model="h100-80gb")
    return {"users": users, "node_token": node_token, "job": job, "template": template, "statement": statement,
            "budget": budget, "loan": loan, "cluster": cluster, "array": job_array}


@pytest.fixture
def client_for(world):
    """A Django test client acting as one of PRINCIPALS (session login for people, a token for the node)."""

    def make(principal: str, *, csrf: bool = False) -> Client:
        if principal == "node":
            return Client(enforce_csrf_checks=csrf, HTTP_AUTHORIZATION=f"Node {world['node_token']}")
        client = Client(enforce_csrf_checks=csrf)
        if principal != "anonymous":
            client.force_login(world["users"][principal])
        return client

    return make
