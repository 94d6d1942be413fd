"""End to end: API -> PostgreSQL -> Celery worker (real process, Redis broker) -> scheduling cycle -> node
agent (real process, fake GPUs) -> a real job process -> its output and exit code back in the portal."""

import pytest
from rest_framework.test import APIClient

from scheduler.models import Allocation, Job, Node
from tests.processes import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def fast_heartbeats(settings):
    settings.ROTA_NODE_HEARTBEAT_INTERVAL_S = 1


def state_of(job_id):
    return Job.objects.filter(pk=job_id).values_list("state", flat=True).first()


def test_a_submitted_job_runs_on_a_gpu_node_and_its_output_comes_back(
    alice, cluster, celery_worker, start_agent, fast_heartbeats
):
    node = cluster["nodes"][0]
    start_agent(node)
    wait_for(lambda: Node.objects.get(pk=node.pk).registered_at, what="the agent to register")
    client = APIClient()
    client.force_authenticate(alice)
    response = client.post("/api/v1/jobs/", {
        "name": "hello", "gpu_model": "h100-80gb", "gpus": 2,
        "command": "echo \"gpus=$CUDA_VISIBLE_DEVICES job=$ROTA_JOB_ID\"; sleep 1; echo bye",
    }, format="json")
    assert response.status_code == 201, response.json()
    job_id = response.json()["id"]

    wait_for(lambda: state_of(job_id) == "succeeded", timeout=45, what="the job to succeed")
    job = Job.objects.get(pk=job_id)
    assert job.exit_code == 0
    states = list(job.transitions.values_list("to_state", flat=True))
    assert states == ["pending", "admitted", "starting", "running", "succeeded"]
    log = client.get(f"/api/v1/jobs/{job_id}/logs/").json()
    assert log["content"] == f"gpus=0,1 job={job_id}\nbye\n"
    assert not Allocation.objects.filter(job_id=job_id, ended_at__isnull=True).exists()


def test_cancelling_a_running_job_stops_its_process_and_frees_its_gpus(
    alice, cluster, celery_worker, start_agent, fast_heartbeats
):
    node = cluster["nodes"][0]
    start_agent(node)
    client = APIClient()
    client.force_authenticate(alice)
    job_id = client.post("/api/v1/jobs/", {
        "name": "long", "gpu_model": "h100-80gb", "command": "echo started; sleep 300",
    }, format="json").json()["id"]
    wait_for(lambda: state_of(job_id) == "running", timeout=45, what="the job to run")
    assert client.post(f"/api/v1/jobs/{job_id}/cancel/").status_code == 200
    wait_for(lambda: state_of(job_id) == "cancelled", timeout=45, what="the job to be cancelled")
    assert not Allocation.objects.filter(job_id=job_id, ended_at__isnull=True).exists()
    follow_up = client.post("/api/v1/jobs/", {
        "name": "after", "gpu_model": "h100-80gb", "gpus": 4, "command": "true",
    }, format="json").json()["id"]
    wait_for(lambda: state_of(follow_up) == "succeeded", timeout=45, what="all 4 GPUs to be usable again")


def test_a_job_over_the_team_limit_waits_with_quota_exceeded(alice, cluster, celery_worker, fast_heartbeats):
    client = APIClient()
    client.force_authenticate(alice)
    client.post("/api/v1/jobs/", {"name": "big", "gpu_model": "h100-80gb", "gpus": 4, "command": "sleep 30"},
                format="json")
    over = client.post("/api/v1/jobs/", {"name": "over", "gpu_model": "h100-80gb", "gpus": 1, "command": "true"},
                       format="json").json()["id"]
    wait_for(lambda: Job.objects.get(pk=over).pending_reason_code == "QuotaExceeded", timeout=30,
             what="the QuotaExceeded reason")
    reason = client.get(f"/api/v1/jobs/{over}/").json()["pending_reason"]
    assert reason["details"]["limit"] == 4 and reason["details"]["in_use"] == 4
