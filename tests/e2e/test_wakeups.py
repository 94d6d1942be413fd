"""Submit -> running without waiting for a heartbeat: the submit wakes the cycle (Celery, real worker), the
cycle tells the node on commit, and the node agent's long-poll (``POST /api/v1/node/wait/``) makes it send
its heartbeat at once. The portal names a 10 s heartbeat interval here, so a job that runs within a couple
of seconds, three times in a row, learnt of its start from the long-poll, not from a heartbeat."""

import pytest
from rest_framework.test import APIClient

from scheduler.models import Job, JobTransition, Node
from scheduler.services.common import db_now
from tests.processes import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def slow_heartbeats(settings):
    settings.ROTA_NODE_HEARTBEAT_INTERVAL_S = 10


def _state(job_id):
    return Job.objects.filter(pk=job_id).values_list("state", flat=True).first()


def _reached(job_id, state):
    return JobTransition.objects.filter(job_id=job_id, to_state=state).values_list("at", flat=True).first()


def test_an_idle_node_runs_a_submitted_job_long_before_its_next_heartbeat(
    alice, cluster, celery_worker, start_agent, slow_heartbeats
):
    node = cluster["nodes"][0]
    start_agent(node)
    wait_for(lambda: Node.objects.get(pk=node.pk).registered_at, what="the agent to register")
    client = APIClient()
    client.force_authenticate(alice)
    for n in range(3):
        job_id = client.post("/api/v1/jobs/", {"name": f"quick-{n}", "gpu_model": "h100-80gb", "command": "true"},
                             format="json").json()["id"]
        wait_for(lambda job_id=job_id: _state(job_id) == "succeeded", timeout=30, what="the job to succeed")
        submitted, running = _reached(job_id, "pending"), _reached(job_id, "running")
        assert (running - submitted).total_seconds() < 2.5, f"job {n}: {running - submitted} from submit to running"


def test_a_cancel_reaches_the_node_long_before_its_next_heartbeat(
    alice, cluster, celery_worker, start_agent, slow_heartbeats
):
    node = cluster["nodes"][0]
    start_agent(node)
    client = APIClient()
    client.force_authenticate(alice)
    for n in range(2):
        job_id = client.post("/api/v1/jobs/", {"name": f"long-{n}", "gpu_model": "h100-80gb", "command": "sleep 300"},
                             format="json").json()["id"]
        wait_for(lambda job_id=job_id: _state(job_id) == "running", timeout=30, what="the job to run")
        asked = db_now()
        assert client.post(f"/api/v1/jobs/{job_id}/cancel/").status_code == 200
        wait_for(lambda job_id=job_id: _state(job_id) == "cancelled", timeout=30, what="the job to be cancelled")
        assert (_reached(job_id, "cancelled") - asked).total_seconds() < 2.5
