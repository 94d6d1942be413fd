"""Notifications end to end: a job that fails on a real node agent is announced by the real Celery worker,
after the commit, to a real SMTP server and a real webhook receiver on loopback: exactly one signed message
each, the webhook retried once after its receiver failed."""

import hashlib
import hmac

import pytest
from rest_framework.test import APIClient

from notifications.models import Delivery
from notifications.services import preference_save
from scheduler.models import Job, Node
from tests.notifications.conftest import SMTP_PORT
from tests.processes import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def worker_env(worker_env):
    """The worker mails through the test's SMTP server, may call the loopback receiver, retries after 1 s."""
    worker_env.update(EMAIL_HOST="127.0.0.1", EMAIL_PORT=str(SMTP_PORT), ROTA_WEBHOOK_ALLOW_PRIVATE="1",
                      ROTA_NOTIFY_BACKOFF_S="1")
    return worker_env


def test_a_failed_job_is_announced_once_by_email_and_webhook(alice, bob, charlie, cluster, smtp_server,
                                                            webhook_receiver, celery_worker, start_agent, settings):
    settings.ROTA_NODE_HEARTBEAT_INTERVAL_S = 1
    for user in (alice, bob, charlie):
        user.email = f"{user.username}@example.org"
        user.save()
    pref = preference_save(user=alice, events=["job-failed"], scope="mine", email_enabled=True,
                           webhook_url=webhook_receiver.url)
    preference_save(user=charlie, events=["job-failed"], scope="team", email_enabled=True, webhook_url="")
    webhook_receiver.answers = [500]
    node = cluster["nodes"][0]
    start_agent(node)
    wait_for(lambda: Node.objects.get(pk=node.pk).registered_at, what="the agent to register")
    client = APIClient()
    client.force_authenticate(alice)
    job_id = client.post("/api/v1/jobs/", {"name": "doomed", "gpu_model": "h100-80gb", "command": "exit 5"},
                         format="json").json()["id"]
    wait_for(lambda: Job.objects.get(pk=job_id).state == "failed", timeout=60, what="the job to fail")
    wait_for(lambda: Delivery.objects.filter(state="sent").count() == 2, timeout=30, what="both deliveries")
    assert [m["to"] for m in smtp_server.messages] == [["alice@example.org"]]  # charlie (nlp) is told nothing
    assert [r["status"] for r in webhook_receiver.requests] == [500, 200]
    [body] = webhook_receiver.bodies()
    assert body["job"]["id"] == job_id and body["event"] == "job-failed"
    sent = webhook_receiver.requests[1]
    mac = hmac.new(pref.webhook_secret.encode(), sent["headers"]["X-Rota-Timestamp"].encode() + b"." + sent["body"],
                   hashlib.sha256).hexdigest()
    assert sent["headers"]["X-Rota-Signature"] == f"v1={mac}"
    assert Delivery.objects.get(channel="webhook").tries == 2
