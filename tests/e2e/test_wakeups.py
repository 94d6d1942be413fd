"""Submit -> running without waiting for a heartbeat: the submit wakes the cycle (Celery, real worker), the cycle
tells the node on commit, and the node agent's long-poll (``POST /api/v1/node/wait/``) brings the job's assignment
with the news, so the agent starts it without a heartbeat. The portal names a 60 s heartbeat interval here, so a
job that runs within a third of it, three times in a row (each submitted right after the last one ended, so a
heartbeat-paced start would take most of an interval), learnt of its start from the long-poll, not from a
heartbeat. The bound is far from what a loaded box takes (seconds): this checks the mechanism, not its speed. The
submits and cancels here hand their wake-ups to the wake-up sender's thread (scheduler/wake_sender.py), as served
requests do."""

import pytest
from rest_framework.test import APIClient

from scheduler.models import Job, JobTransition, Node
from scheduler.services.common import db_now
from tests.processes import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def wakeups_in_background(settings):
    settings.ROTA_WAKE_IN_BACKGROUND = True


@pytest.fixture
def slow_heartbeats(settings):
    settings.ROTA_NODE_HEARTBEAT_INTERVAL_S = HEARTBEAT_S


HEARTBEAT_S = 60
LONG_BEFORE_S = HEARTBEAT_S / 3  # a heartbeat-paced start or cancel would take up to a whole interval


def _state(job_id):
    return Job.objects.filter(pk=job_id).values_list("state", flat=True).first()


def _reached(job_id, state):
    return JobTransition.objects.filter(job_id=job_id, to_state=state).values_list("at", flat=True).first()


def _beats(node) -> int:
    return Node.objects.filter(pk=node.pk).values_list("heartbeat_seq", flat=True).get()


def test_an_idle_node_runs_a_submitted_job_long_before_its_next_heartbeat(
    alice, cluster, celery_worker, start_agent, slow_heartbeats
):
    node = cluster["nodes"][0]
    start_agent(node)
    wait_for(lambda: _beats(node) >= 1, what="the agent to register and heartbeat")
    client = APIClient()
    client.force_authenticate(alice)
    beaten = 0  # the jobs during whose submit -> end a heartbeat came
    for n in range(3):
        beats = _beats(node)
        job_id = client.post("/api/v1/jobs/", {"name": f"quick-{n}", "gpu_model": "h100-80gb", "command": "true"},
                             format="json").json()["id"]
        wait_for(lambda job_id=job_id: _state(job_id) == "succeeded", timeout=HEARTBEAT_S, what="the job to succeed")
        beaten += _beats(node) != beats
        submitted, running = _reached(job_id, "pending"), _reached(job_id, "running")
        assert (running - submitted).total_seconds() < LONG_BEFORE_S, f"job {n}: {running - submitted} to running"
    # Heartbeat-paced starts would each have waited for a heartbeat. The agent's beat after the first comes at a
    # random part of the interval (scheduler/agent/loop.py), so one job's second or so may happen to hold it.
    assert beaten <= 1, "heartbeats brought the starts, not the news"


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
        wait_for(lambda job_id=job_id: _state(job_id) == "running", timeout=HEARTBEAT_S, what="the job to run")
        asked = db_now()
        assert client.post(f"/api/v1/jobs/{job_id}/cancel/").status_code == 200
        wait_for(lambda job_id=job_id: _state(job_id) == "cancelled", timeout=HEARTBEAT_S,
                 what="the job to be cancelled")
        assert (_reached(job_id, "cancelled") - asked).total_seconds() < LONG_BEFORE_S
