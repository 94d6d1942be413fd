"""Who is told about what: a transition becomes one notification per person who asked for that event and may
see the job, each delivered once by e-mail (a real SMTP server) and a signed webhook (a real HTTP receiver)."""

import hashlib
import hmac
import json

import pytest

from notifications.delivery import FAILED, RETRY, SENT, delivery_send
from notifications.models import Delivery, Notification
from notifications.services import preference_save, transition_notify
from portal.models import Membership
from scheduler.cycle import run_cycle
from scheduler.services.arrays import array_submit
from scheduler.services.jobs import job_submit

pytestmark = pytest.mark.django_db

JOB = {"command": "python train.py", "gpu_model": "h100-80gb"}


def subscribe(user, events=("job-failed",), scope="mine", webhook_url="", email=True):
    if email and not user.email:
        user.email = f"{user.username}@example.org"
        user.save(update_fields=["email"])
    return preference_save(user=user, events=list(events), scope=scope, email_enabled=email, webhook_url=webhook_url)


def run_job(client, job, exit_code: int):
    """Admit ``job`` (a cycle), then the node reports it started and ended with ``exit_code``."""
    run_cycle()
    job.refresh_from_db()
    for event in ({"type": "started"}, {"type": "exited", "exit_code": exit_code}):
        client.post(f"/api/v1/node/jobs/{job.pk}/events/", {"attempt": job.attempt, **event}, format="json")
    job.refresh_from_db()
    return job


def send_all() -> list[str]:
    return [delivery_send(pk, last_try=False) for pk in Delivery.objects.order_by("id").values_list("pk", flat=True)]


def test_a_failed_job_is_told_once_by_email_and_a_signed_webhook(alice, node_client, smtp_server, webhook_receiver):
    pref = subscribe(alice, webhook_url=webhook_receiver.url)
    job = run_job(node_client(), job_submit(user=alice, name="train", **JOB), 3)
    ended = job.transitions.last()
    made = transition_notify(ended.pk)
    assert len(made) == 2 and transition_notify(ended.pk) == []  # a task run twice tells nobody twice
    assert send_all() == [SENT, SENT] and send_all() == [SENT, SENT]  # sent ones are not sent again
    [mail] = smtp_server.messages
    assert mail["to"] == ["alice@example.org"]
    assert mail["message"]["Subject"] == f"[Rota] job {job.pk} train (vision): failed: exited with code 3"
    assert f"/jobs/{job.pk}/" in mail["message"].get_payload()
    [request] = webhook_receiver.requests
    headers, body = request["headers"], request["body"]
    expected = hmac.new(pref.webhook_secret.encode(), headers["X-Rota-Timestamp"].encode() + b"." + body,
                        hashlib.sha256).hexdigest()
    assert headers["X-Rota-Signature"] == f"v1={expected}" and headers["X-Rota-Event"] == "job-failed"
    payload = json.loads(body)
    assert payload["text"].startswith("Rota: job") and payload["job"]["id"] == job.pk
    assert payload["job"]["state"] == "failed"


def test_only_the_events_asked_for_are_told(alice, node_client):
    subscribe(alice, events=["job-succeeded"])
    job = run_job(node_client(), job_submit(user=alice, name="t", **JOB), 1)
    assert all(transition_notify(t.pk) == [] for t in job.transitions.all())
    job = run_job(node_client(), job_submit(user=alice, name="t2", **JOB), 0)
    assert [transition_notify(t.pk) != [] for t in job.transitions.all()] == [False, False, False, True]
    assert Notification.objects.get().event == "job-succeeded"


def test_team_mates_who_asked_are_told_and_another_team_never_is(alice, bob, charlie, node_client):
    subscribe(alice, scope="mine")
    subscribe(bob, scope="team")
    subscribe(charlie, scope="team")  # nlp: may not see vision's jobs
    job = run_job(node_client(), job_submit(user=alice, name="t", **JOB), 1)
    transition_notify(job.transitions.last().pk)
    assert sorted(Notification.objects.values_list("user__username", flat=True)) == ["alice", "bob"]


def test_a_team_mate_who_asked_only_about_their_own_jobs_is_not_told(alice, bob, node_client):
    subscribe(bob, scope="mine")
    job = run_job(node_client(), job_submit(user=alice, name="t", **JOB), 1)
    assert transition_notify(job.transitions.last().pk) == []


def test_a_submitter_who_left_the_team_is_told_nothing(alice, node_client):
    subscribe(alice)
    job = run_job(node_client(), job_submit(user=alice, name="t", **JOB), 1)
    Membership.objects.filter(user=alice).delete()
    assert transition_notify(job.transitions.last().pk) == [] and not Notification.objects.exists()


def test_an_array_is_told_complete_once_when_its_last_task_ends(alice, node_client):
    subscribe(alice, events=["array-completed"])
    client = node_client()
    sweep = array_submit(user=alice, array="0-1", name="sweep", **JOB)
    first, second = sweep.tasks.order_by("array_index")
    run_job(client, first, 0)
    assert transition_notify(first.transitions.last().pk) == []
    run_job(client, second, 1)
    last = second.transitions.last()
    assert len(transition_notify(last.pk)) == 1 and transition_notify(last.pk) == []
    note = Notification.objects.get()
    assert note.job_array == sweep
    assert note.message == f"array {sweep.pk} sweep (vision) ended: 1 failed, 1 succeeded"


def test_a_receiver_that_fails_is_tried_again_and_a_last_failure_is_logged(alice, node_client, webhook_receiver):
    subscribe(alice, webhook_url=webhook_receiver.url, email=False)
    webhook_receiver.answers = [500, 502]
    job = run_job(node_client(), job_submit(user=alice, name="t", **JOB), 1)
    [delivery_id] = transition_notify(job.transitions.last().pk)
    assert delivery_send(delivery_id, last_try=False) == RETRY
    delivery = Delivery.objects.get()
    assert (delivery.state, delivery.tries, delivery.last_error) == ("pending", 1, "the receiver answered 500")
    assert delivery_send(delivery_id, last_try=True) == FAILED
    delivery.refresh_from_db()
    assert (delivery.state, delivery.tries, delivery.response_status) == ("failed", 2, 502)
    assert delivery_send(delivery_id, last_try=False) == "failed"  # a failed one stays failed
    assert len(webhook_receiver.requests) == 2


def test_a_webhook_to_a_private_address_is_refused_unless_allowed(alice, node_client, webhook_receiver, settings):
    subscribe(alice, webhook_url=webhook_receiver.url, email=False)
    settings.ROTA_WEBHOOK_ALLOW_PRIVATE = False
    job = run_job(node_client(), job_submit(user=alice, name="t", **JOB), 1)
    [delivery_id] = transition_notify(job.transitions.last().pk)
    assert delivery_send(delivery_id, last_try=False) == FAILED  # final at once: trying again cannot help
    assert "non-public address (127.0.0.1)" in Delivery.objects.get().last_error
    assert webhook_receiver.requests == []


def test_the_page_saves_preferences_names_bad_fields_and_shows_only_ones_own(alice, bob, client, node_client):
    alice.email = "alice@example.org"
    alice.save()
    client.force_login(alice)
    bad = client.post("/notifications/", {"events": ["job-failed"], "scope": "mine", "email_enabled": "on",
                                          "webhook_url": "ftp://example.org/x"})
    assert "must be an http:// or https:// URL with a host" in bad.content.decode()
    ok = client.post("/notifications/", {"events": ["job-failed"], "scope": "team", "email_enabled": "on",
                                         "webhook_url": "https://hooks.example.org/rota"})
    assert ok.status_code == 302
    subscribe(bob, scope="team")
    job = run_job(node_client(), job_submit(user=alice, name="mine", **JOB), 1)
    transition_notify(job.transitions.last().pk)
    page = client.get("/notifications/").content.decode()
    assert page.count(f"job {job.pk} mine") == 1 and "webhook-secret" in page
    assert "e-mail: pending" in page and "webhook: pending" in page
    bob_page = client.get("/notifications/")  # alice's session: bob's copy of the event is not listed twice
    assert bob_page.content.decode().count(f"job {job.pk} mine") == 1


def test_the_api_reads_and_saves_preferences_and_lists_only_ones_own_notifications(alice, charlie, api,
                                                                                   node_client):
    alice.email = "alice@example.org"
    alice.save()
    resp = api(alice).put("/api/v1/notifications/preferences/", {
        "events": ["job-failed"], "scope": "mine", "email_enabled": True, "webhook_url": "https://hooks.example.org/r"},
        format="json")
    assert resp.status_code == 200 and resp.json()["events"] == ["job-failed"] and resp.json()["webhook_secret"]
    bad = api(alice).put("/api/v1/notifications/preferences/", {
        "events": ["job-exploded"], "scope": "everyone", "email_enabled": True, "webhook_url": ""}, format="json")
    assert bad.status_code == 400 and set(bad.json()["errors"]) == {"events", "scope"}
    job = run_job(node_client(), job_submit(user=alice, name="t", **JOB), 1)
    transition_notify(job.transitions.last().pk)
    [note] = api(alice).get("/api/v1/notifications/").json()["results"]
    assert note["job"] == job.pk and [d["channel"] for d in note["deliveries"]] == ["email", "webhook"]
    assert api(charlie).get("/api/v1/notifications/").json()["results"] == []
    assert api(charlie).get("/api/v1/notifications/preferences/").json()["events"] == []


def test_a_job_pending_longer_than_asked_is_told_once_per_attempt(alice, bob, charlie):
    from datetime import timedelta

    from notifications.services import pending_notify
    from scheduler.models import JobTransition
    from scheduler.services.common import db_now

    preference_save(user=alice, events=["job-pending-long"], scope="mine", email_enabled=False, webhook_url="",
                    pending_minutes=30)
    preference_save(user=bob, events=["job-pending-long"], scope="mine", email_enabled=False, webhook_url="",
                    pending_minutes=30)  # bob asked about his own jobs only
    preference_save(user=charlie, events=["job-pending-long"], scope="team", email_enabled=False, webhook_url="",
                    pending_minutes=5)  # nlp: may not see vision's jobs
    waiting = job_submit(user=alice, name="big", command="true", gpu_model="h100-80gb", gpus=16)
    now = db_now()
    assert pending_notify(now) == [] and not Notification.objects.exists()  # not waited long enough yet
    JobTransition.objects.filter(job=waiting).update(at=now - timedelta(minutes=45))
    pending_notify(now)
    pending_notify(now)
    [note] = Notification.objects.all()
    assert note.user == alice and note.event == "job-pending-long"
    assert note.message.startswith(f"job {waiting.pk} big (vision) has waited 45 min")


def test_pending_minutes_out_of_range_is_named(alice):
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError) as exc:
        preference_save(user=alice, events=[], scope="mine", email_enabled=False, webhook_url="", pending_minutes=1)
    assert exc.value.message_dict["pending_minutes"] == ["must be between 5 and 10080; got 1"]
