"""Wake-ups are hints (DESIGN.md, principle 2): with the broker unreachable, a submit still answers 201 and
a node's report is still accepted; the periodic cycle schedules the work when the broker returns."""

from unittest import mock

import pytest
from kombu.exceptions import OperationalError as BrokerDown

from scheduler.models import Job
from scheduler.tasks import run_cycle

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_submit_while_the_broker_is_down_is_saved_and_answered_201(alice, api):
    with mock.patch.object(run_cycle, "delay", side_effect=BrokerDown("Error 111 connecting to localhost:6379")):
        response = api(alice).post("/api/v1/jobs/", {"name": "b", "gpu_model": "h100-80gb", "command": "true"},
                                   format="json")
    assert response.status_code == 201, response.content
    assert Job.objects.get(pk=response.json()["id"]).state == "pending"


def test_a_node_event_while_the_broker_is_down_is_accepted(alice, cluster, node_client):
    from scheduler.cycle import run_cycle as cycle
    from scheduler.services.jobs import job_submit

    job = job_submit(user=alice, name="j", command="true", gpu_model="h100-80gb")
    cycle()
    client = node_client()
    with mock.patch.object(run_cycle, "delay", side_effect=BrokerDown("Error 111 connecting to localhost:6379")):
        assert client.post("/api/v1/node/heartbeat/", {"seq": 1}, format="json").status_code == 200
        response = client.post(f"/api/v1/node/jobs/{job.pk}/events/", {"attempt": 1, "type": "exited",
                                                                       "exit_code": 0}, format="json")
    assert response.status_code == 200, response.content
    assert Job.objects.get(pk=job.pk).state == "succeeded"
