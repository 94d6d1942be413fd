"""The whole engine through the live system: reclaim of borrowed GPUs frees them on the node (the agent
stops the borrower's processes after the grace period), the preempted job is requeued, and it resumes and
finishes once capacity frees up."""

import json
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from scheduler.models import Allocation, Job, Preemption
from tests.factories import MembershipFactory, UserFactory
from tests.processes import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PROFILES = Path(__file__).resolve().parents[2] / "scheduler" / "agent" / "profiles"
RESUMABLE = 'if [ "$ROTA_ATTEMPT" -gt 1 ]; then echo "resumed on attempt $ROTA_ATTEMPT"; exit 0; fi; sleep 120'


def client_for(user):
    client = APIClient()
    client.force_authenticate(user)
    return client


def lender_and_small_node(cluster, start_agent, tmp_path):
    """nina of nlp (the lender, who reclaims) and an agent on the fixture's first node with 4 GPUs, so vision
    must borrow; returns nina."""
    nina = UserFactory(username="nina")
    MembershipFactory(user=nina, team=cluster["nlp"])
    profile = json.loads((PROFILES / "h100x8.json").read_text())
    profile["gpus"][0]["count"] = 4  # the node the fixture declares: 4 GPUs, so vision must borrow
    (tmp_path / "h100x4.json").write_text(json.dumps(profile))
    start_agent(cluster["nodes"][0], profile=str(tmp_path / "h100x4.json"))
    return nina


def test_reclaim_frees_the_lenders_gpus_on_the_node_and_the_victim_resumes(
    alice, cluster, celery_worker, start_agent, settings, tmp_path
):
    settings.ROTA_NODE_HEARTBEAT_INTERVAL_S = 1
    nina = lender_and_small_node(cluster, start_agent, tmp_path)
    vision = client_for(alice)
    borrowers = [
        vision.post("/api/v1/jobs/", {"name": f"v{i}", "gpu_model": "h100-80gb", "command": RESUMABLE},
                    format="json").json()["id"]
        for i in range(4)
    ]
    wait_for(lambda: Job.objects.filter(pk__in=borrowers, state="running").count() == 4, timeout=60,
             what="vision to run on all 4 GPUs (2 guaranteed + 2 borrowed)")

    owner_job = client_for(nina).post("/api/v1/jobs/", {
        "name": "nlp-reclaims", "gpu_model": "h100-80gb", "command": "echo nlp got its GPU; sleep 2",
    }, format="json").json()["id"]
    wait_for(lambda: Job.objects.get(pk=owner_job).state == "succeeded", timeout=60,
             what="nlp to reclaim its guaranteed GPU and finish")

    [preemption] = Preemption.objects.all()
    assert preemption.reason == "Reclaim" and preemption.by_job_id == owner_job
    victim = Job.objects.get(pk=preemption.job_id)
    causes = list(victim.transitions.values_list("cause", flat=True))
    assert "preempted: requeued" in causes
    wait_for(lambda: Job.objects.get(pk=victim.pk).state == "succeeded", timeout=60,
             what="the preempted job to resume and finish")
    victim.refresh_from_db()
    assert victim.attempt == 2
    log = vision.get(f"/api/v1/jobs/{victim.pk}/logs/").json()
    assert log["content"] == "resumed on attempt 2\n"
    open_allocs = Allocation.objects.filter(ended_at__isnull=True)
    assert open_allocs.count() == 3, "the three other vision jobs still hold their GPUs"
    assert len(set(open_allocs.values_list("gpu_id", flat=True))) == 3
