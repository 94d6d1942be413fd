"""Arrays and dependencies live: a real Celery worker runs the cycles, a real node agent runs the tasks as
processes. An array of 8 capped at 2 never holds more than 2 GPUs at once and each task sees its index; an
evaluation that depends afterok on training starts only after it succeeds, and never when it fails."""

import pytest
from rest_framework.test import APIClient

from scheduler.models import Allocation, Job, JobLog, Node
from tests.processes import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def fast_heartbeats(settings):
    settings.ROTA_NODE_HEARTBEAT_INTERVAL_S = 1


@pytest.fixture
def live(alice, cluster, celery_worker, start_agent, fast_heartbeats):
    node = cluster["nodes"][0]
    start_agent(node)
    wait_for(lambda: Node.objects.get(pk=node.pk).registered_at, what="the agent to register")
    client = APIClient()
    client.force_authenticate(alice)
    return client


def test_an_array_of_8_capped_at_2_never_runs_more_than_2_at_once(live):
    body = live.post("/api/v1/jobs/", {"name": "sweep", "gpu_model": "h100-80gb", "array": "0-7%2",
                                       "command": 'echo "task $ROTA_ARRAY_INDEX of $ROTA_ARRAY_ID"; sleep 1'},
                     format="json").json()
    ids, most = body["ids"], 0

    def all_done():
        nonlocal most
        holding = Allocation.objects.filter(job_id__in=ids, ended_at__isnull=True).values("job_id").distinct().count()
        most = max(most, holding)
        return set(Job.objects.filter(pk__in=ids).values_list("state", flat=True)) == {"succeeded"}

    wait_for(all_done, timeout=120, interval=0.1, what="every task to succeed")
    assert most == 2
    logs = dict(JobLog.objects.filter(job_id__in=ids).values_list("job__array_index", "content"))
    assert logs == {i: f"task {i} of {body['array_id']}\n" for i in range(8)}


def test_an_evaluation_runs_only_after_its_training_succeeds(live):
    def submit(name, command, **extra):
        return live.post("/api/v1/jobs/", {"name": name, "gpu_model": "h100-80gb", "command": command, **extra},
                         format="json").json()["id"]

    good = submit("train-good", "sleep 2; echo trained")
    bad = submit("train-bad", "sleep 1; exit 4")
    after_good = submit("eval-good", "echo evaluated", kind="evaluation", dependency=f"afterok:{good}")
    after_bad = submit("eval-bad", "echo evaluated", kind="evaluation", dependency=f"afterok:{bad}")

    def state(pk):
        return Job.objects.filter(pk=pk).values_list("state", flat=True).first()

    wait_for(lambda: state(after_good) == "succeeded" and state(after_bad) == "cancelled", timeout=90,
             what="the evaluations to settle")
    evaluation, training = Job.objects.get(pk=after_good), Job.objects.get(pk=good)
    assert evaluation.admitted_at >= training.finished_at
    never = Job.objects.get(pk=after_bad)
    assert never.pending_reason_code == "DependencyNeverSatisfied" and not never.allocations.exists()
    assert live.get(f"/api/v1/jobs/{after_bad}/").json()["pending_reason"]["code"] == "DependencyNeverSatisfied"
