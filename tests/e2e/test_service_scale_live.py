"""Changing a running service's size, end to end with real processes (portal, Celery worker and beat, a node
agent on the container executor, the demo inference server): scaled 2 -> 3 -> 1 through the API while
callers use it, and autoscaled up under request load through the gateway and back down when it stops."""

import time

import pytest
from django.test import Client
from rest_framework.test import APIClient

from portal.models import AuditEntry
from scheduler.audit import audit
from scheduler.models import InferenceService, Job, ServiceKey
from tests.e2e.test_containers import images  # noqa: F401
from tests.e2e.test_service_live import (  # noqa: F401  (fixtures)
    celery_beat,
    generate,
    healthy,
    replicas_reached,
    service_node,
    submit_replicas,
)
from tests.processes import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def active(service="llm") -> list[int]:
    return list(Job.objects.filter(name__regex=rf"^{service}(-[0-9]+)?$",
                                   state__in=("pending", "admitted", "starting", "running"))
                .order_by("id").values_list("id", flat=True))


def test_a_running_service_is_scaled_2_3_1_and_callers_reach_exactly_the_replicas_there_are(
    alice, service_node  # noqa: F811
):
    ids = submit_replicas(alice, "llm", 2)
    wait_for(lambda: healthy(ids), timeout=90, what="both replicas to be healthy")
    _, raw = ServiceKey.issue(Job.objects.get(pk=ids[0]).team, "llm", alice)
    client = Client()
    api = APIClient()
    api.force_authenticate(alice)
    answer = api.post("/api/v1/services/vision/llm/scale/", {"replicas": 3}, format="json")
    assert answer.status_code == 200 and len(answer.json()["started"]) == 1
    wait_for(lambda: len(active()) == 3 and healthy(active()), timeout=90, what="the third replica")
    assert replicas_reached(client, raw, times=9) == {"llm-1", "llm-2", "llm-3"}

    answer = api.post("/api/v1/services/vision/llm/scale/", {"replicas": 1}, format="json")
    assert answer.status_code == 200 and len(answer.json()["cancelled"]) == 2
    wait_for(lambda: Job.objects.filter(state="cancelled").count() == 2, timeout=60, what="two replicas to stop")
    assert active() == [ids[0]]
    assert replicas_reached(client, raw) == {"llm-1"}
    assert audit() == []


def test_autoscale_adds_replicas_under_load_and_removes_them_once_it_stops(alice, service_node):  # noqa: F811
    ids = submit_replicas(alice, "llm", 1)
    wait_for(lambda: healthy(ids), timeout=90, what="the replica to be healthy")
    team = Job.objects.get(pk=ids[0]).team
    _, raw = ServiceKey.issue(team, "llm", alice)
    api = APIClient()
    api.force_authenticate(alice)
    answer = api.put("/api/v1/services/vision/llm/autoscale/", {"enabled": True, "min_replicas": 1,
                                                                 "max_replicas": 3, "target_rps": 2,
                                                                 "scale_down_delay_s": 4}, format="json")
    assert answer.status_code == 200
    client = Client()
    deadline = time.monotonic() + 120
    while len(active()) < 2:  # ~10 requests/s against a target of 2 per replica
        assert time.monotonic() < deadline, InferenceService.objects.get().last_decision
        assert generate(client, raw).status_code == 200
        time.sleep(0.1)
    row = InferenceService.objects.get()
    assert "up to" in row.last_decision and row.rate_rps > 2
    wait_for(lambda: len(active()) == 1, timeout=90, what="the autoscaler to scale back down without traffic")
    assert active() == [ids[0]]
    reasons = list(AuditEntry.objects.filter(action="service.scale", actor=None).values_list("reason", flat=True))
    assert any("up to" in r for r in reasons) and any("down to 1 after" in r for r in reasons), reasons
    page = Client()
    page.force_login(alice)
    html = page.get("/services/vision/llm/").content.decode()
    assert "On: 1–3 replicas" in html and "Last decision" in html
