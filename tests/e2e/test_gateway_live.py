"""A real inference service behind the gateway: two replicas (python http.server jobs) started by a real agent
with the process executor, each listening on its ROTA_PORT; the agent reports host:port, and
/serve/<team>/<service>/ reaches both in turn with a key and refuses a caller without one."""

import pytest
from rest_framework.test import APIClient

from scheduler.models import Job, ServiceKey
from tests.processes import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SERVE = 'exec python3 -m http.server "$ROTA_PORT" --bind 127.0.0.1'


@pytest.fixture
def fast_heartbeats(settings):
    settings.ROTA_NODE_HEARTBEAT_INTERVAL_S = 1


def test_two_replicas_answer_through_the_gateway_with_a_key_only(
    alice, cluster, celery_worker, start_agent, fast_heartbeats, client
):
    node = cluster["nodes"][0]
    start_agent(node, extra=("--service-address", "127.0.0.1"))
    api = APIClient()
    api.force_authenticate(alice)
    ids = []
    for name in ("llm-1", "llm-2"):
        response = api.post("/api/v1/jobs/", {"name": name, "kind": "inference", "gpu_model": "h100-80gb",
                                              "command": SERVE}, format="json")
        assert response.status_code == 201, response.json()
        ids.append(response.json()["id"])

    def addresses():
        rows = Job.objects.filter(pk__in=ids, state="running").values_list("service_address", "service_port")
        return len(rows) == 2 and all(a == f"127.0.0.1:{p}" for a, p in rows) and {a for a, _ in rows}

    wait_for(addresses, timeout=60, what="both replicas to run and report their address")
    expected = addresses()
    _, raw = ServiceKey.issue(cluster["vision"], "llm", alice)
    assert client.get("/serve/vision/llm/").status_code == 401

    def reached() -> set:
        seen = set()
        for _ in range(4):
            answer = client.get("/serve/vision/llm/", HTTP_AUTHORIZATION=f"Bearer {raw}")
            if answer.status_code != 200:  # the server may still be binding its port
                return set()
            assert b"Directory listing" in answer.content
            seen.add(answer["X-Rota-Replica"])
        return seen

    wait_for(lambda: reached() == expected, timeout=30, what="both replicas to answer through the gateway")
