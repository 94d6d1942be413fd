"""Checkpoints (the job's node or its team report them) and the work a preemption loses, recorded when the
preemption completes: through the live cycle, the node API and the user API."""

from datetime import timedelta

import pytest

from scheduler.audit import audit
from scheduler.cycle import run_cycle
from scheduler.models import Allocation, Job, Preemption
from scheduler.services.common import db_now
from scheduler.services.jobs import job_submit

pytestmark = pytest.mark.django_db
EVENTS = "/api/v1/node/jobs/{}/events/"


def running(user, client, **kw):
    job = job_submit(user=user, name=kw.pop("name", "train"), command="train", gpu_model="h100-80gb", **kw)
    run_cycle()
    job.refresh_from_db()
    assert job.state == "admitted", job.pending_reason_message
    client.post(EVENTS.format(job.pk), {"attempt": job.attempt, "type": "started"}, format="json")
    job.refresh_from_db()
    assert job.state == "running"
    return job


def backdate(job, seconds: float) -> None:
    """Move the job's attempt ``seconds`` into the past (its start and its allocations)."""
    shift = timedelta(seconds=seconds)
    job.refresh_from_db()
    Job.objects.filter(pk=job.pk).update(started_at=job.started_at - shift, admitted_at=job.admitted_at - shift)
    for alloc in Allocation.objects.filter(job=job, attempt=job.attempt):
        Allocation.objects.filter(pk=alloc.pk).update(started_at=alloc.started_at - shift)


def checkpoint(client, job, at):
    return client.post(EVENTS.format(job.pk), {"attempt": job.attempt, "type": "checkpoint", "at": at.isoformat()},
                       format="json")


def test_a_node_reports_a_checkpoint_of_the_attempt_it_runs(alice, node_client):
    client = node_client()
    job = running(alice, client)
    backdate(job, 600)
    at = db_now() - timedelta(seconds=60)
    answer = checkpoint(client, job, at)
    assert answer.status_code == 200 and answer.json()["recorded"] is True
    job.refresh_from_db()
    assert job.last_checkpoint_at == at


def test_a_checkpoint_is_never_in_the_future_never_before_the_start_and_never_goes_back(alice, node_client):
    client = node_client()
    job = running(alice, client)
    backdate(job, 600)
    job.refresh_from_db()
    assert checkpoint(client, job, job.started_at - timedelta(seconds=1)).json()["recorded"] is False
    before = db_now()
    assert checkpoint(client, job, before + timedelta(days=1)).json()["recorded"] is True  # a node clock ahead
    job.refresh_from_db()
    assert before <= job.last_checkpoint_at <= db_now(), "recorded as the portal's now"
    recorded = job.last_checkpoint_at
    assert checkpoint(client, job, recorded - timedelta(seconds=30)).json()["recorded"] is False
    job.refresh_from_db()
    assert job.last_checkpoint_at == recorded


def test_a_checkpoint_report_names_what_is_wrong(alice, charlie, cluster, node_client):
    client = node_client()
    job = running(alice, client)
    bad = client.post(EVENTS.format(job.pk), {"attempt": job.attempt, "type": "checkpoint"}, format="json")
    assert bad.status_code == 400 and "at" in bad.json()["errors"]
    assert checkpoint(client, Job(pk=job.pk, attempt=job.attempt + 1), db_now()).status_code == 409
    other = node_client(cluster["nodes"][1])  # a node that never held the job
    assert checkpoint(other, job, db_now()).status_code == 404


def test_the_team_reports_a_checkpoint_through_the_api(alice, bob, charlie, staff, api, node_client):
    client = node_client()
    job = running(alice, client)
    answer = api(bob).post(f"/api/v1/jobs/{job.pk}/checkpoint/")  # any member of the team
    assert answer.status_code == 200, answer.json()
    job.refresh_from_db()
    assert job.last_checkpoint_at is not None and answer.json()["attempt"] == job.attempt
    first = job.last_checkpoint_at
    assert api(alice).post(f"/api/v1/jobs/{job.pk}/checkpoint/").status_code == 200
    job.refresh_from_db()
    assert job.last_checkpoint_at > first
    assert api(charlie).post(f"/api/v1/jobs/{job.pk}/checkpoint/").status_code == 404  # another team's job
    assert api(staff).post(f"/api/v1/jobs/{job.pk}/checkpoint/").status_code == 403  # not of the team
    job.refresh_from_db()
    assert job.last_checkpoint_at > first
    waiting = job_submit(user=alice, name="w", command="x", gpu_model="h100-80gb", gpus=4)
    refused = api(alice).post(f"/api/v1/jobs/{waiting.pk}/checkpoint/")
    assert refused.status_code == 409 and "only a running job" in refused.json()["detail"]


def test_a_completed_preemption_records_the_work_lost_since_the_last_checkpoint(alice, node_client):
    client = node_client()
    victim = running(alice, client, gpus=2, priority_class="batch", name="victim")
    running(alice, client, gpus=2, priority_class="interactive", name="other")  # not preemptible
    backdate(victim, 3600)
    saved = db_now() - timedelta(seconds=600)
    assert checkpoint(client, victim, saved).json()["recorded"] is True
    urgent = job_submit(user=alice, name="urgent", command="x", gpu_model="h100-80gb", gpus=2,
                        priority_class="training")
    run_cycle()
    preemption = Preemption.objects.get(job=victim)
    assert preemption.completed_at is None
    assert preemption.gpu_seconds_lost == pytest.approx(2 * 600, abs=30), "the engine's estimate, at the decision"
    client.post(EVENTS.format(victim.pk), {"attempt": 1, "type": "exited", "exit_code": 143}, format="json")
    victim.refresh_from_db()
    assert victim.state == "pending" and victim.attempt == 2
    preemption.refresh_from_db()
    ends = {a.ended_at for a in Allocation.objects.filter(job=victim, attempt=1)}
    assert len(ends) == 1 and preemption.completed_at == ends.pop()
    assert preemption.work_since == saved
    assert preemption.gpu_seconds_lost == pytest.approx(2 * (preemption.completed_at - saved).total_seconds())
    assert urgent.pk == preemption.by_job_id


def test_without_a_checkpoint_the_whole_attempt_is_lost(alice, node_client):
    client = node_client()
    victim = running(alice, client, gpus=4, priority_class="batch")
    backdate(victim, 100)
    victim.refresh_from_db()
    start = victim.started_at
    job_submit(user=alice, name="urgent", command="x", gpu_model="h100-80gb", gpus=1, priority_class="training")
    run_cycle()
    client.post(EVENTS.format(victim.pk), {"attempt": 1, "type": "exited", "exit_code": 143}, format="json")
    preemption = Preemption.objects.get(job=victim)
    allocs = list(Allocation.objects.filter(job=victim, attempt=1))
    assert preemption.work_since == start
    expected = sum((a.ended_at - preemption.work_since).total_seconds() for a in allocs)
    assert preemption.gpu_seconds_lost == pytest.approx(expected) and expected > 4 * 100


def test_the_live_cycle_preempts_the_job_that_loses_the_least_work(alice, node_client):
    """Two equal batch jobs of vision, started together an hour ago, fill the node; one saved its work a
    minute ago. A training job needs two GPUs: the cycle stops the one that checkpointed, which loses a
    minute, not the other's hour. (Among victims of one priority the engine ranks the least work lost since
    a checkpoint, or the start, first: tests/core/test_preemption.py has jobs started at different times.)"""
    client = node_client()
    saved = running(alice, client, gpus=2, priority_class="batch", name="saved")
    unsaved = running(alice, client, gpus=2, priority_class="batch", name="unsaved")
    backdate(saved, 3600)
    backdate(unsaved, 3600)
    Job.objects.filter(pk=unsaved.pk).update(started_at=Job.objects.get(pk=saved.pk).started_at)
    assert checkpoint(client, saved, db_now() - timedelta(seconds=60)).json()["recorded"] is True
    job_submit(user=alice, name="urgent", command="x", gpu_model="h100-80gb", gpus=2, priority_class="training")
    run_cycle()
    assert list(Preemption.objects.values_list("job_id", flat=True)) == [saved.pk]
    assert Preemption.objects.get().gpu_seconds_lost == pytest.approx(2 * 60, abs=10)


def preempted_after_a_checkpoint(alice, client, *, ran_s: float = 3600, saved_s_ago: float = 600):
    """A 2-GPU batch job of vision that ran ``ran_s`` and saved its work ``saved_s_ago`` is preempted by a
    training job and its processes are gone; returns the victim and its completed Preemption."""
    victim = running(alice, client, gpus=2, priority_class="batch", name="victim")
    running(alice, client, gpus=2, priority_class="interactive", name="other")  # not preemptible
    backdate(victim, ran_s)
    assert checkpoint(client, victim, db_now() - timedelta(seconds=saved_s_ago)).json()["recorded"] is True
    job_submit(user=alice, name="urgent", command="x", gpu_model="h100-80gb", gpus=2, priority_class="training")
    run_cycle()
    client.post(EVENTS.format(victim.pk), {"attempt": 1, "type": "exited", "exit_code": 143}, format="json")
    preemption = Preemption.objects.get(job=victim)
    assert preemption.completed_at is not None
    assert audit(ledger=False) == []
    return victim, preemption


def test_the_lost_work_is_credited_back_to_the_teams_fair_share_usage(alice, node_client):
    from scheduler.snapshot import decayed_usage

    client = node_client()
    _victim, preemption = preempted_after_a_checkpoint(alice, client)
    now = db_now() + timedelta(hours=12)
    half_life = 86400.0

    def weight(end):
        return 0.5 ** ((now - end).total_seconds() / half_life)

    held = sum(a.share * ((a.ended_at or now) - a.started_at).total_seconds() * weight(a.ended_at or now)
               for a in Allocation.objects.filter(job__team__name="vision"))
    credit = preemption.gpu_seconds_lost * weight(preemption.completed_at)
    assert credit > 2 * 600 * 0.5 ** 0.5 * 0.99  # 10 min of 2 GPUs, half a half-life ago
    assert decayed_usage(now, half_life)["vision"] == pytest.approx(held - credit, rel=1e-9)


def test_the_job_page_shows_the_last_checkpoint_and_the_credited_lost_work(alice, client, api, node_client):
    from datetime import UTC, datetime
    from decimal import Decimal

    from accounting.rating import cost
    from accounting.services_billing import rate_card_create

    rate_card_create(version=1, effective_from=datetime(2026, 1, 1, tzinfo=UTC), prices={"h100-80gb": Decimal("4")})
    node = node_client()
    job = running(alice, node, name="saved")
    backdate(job, 600)
    assert checkpoint(node, job, db_now() - timedelta(seconds=30)).json()["recorded"] is True
    client.force_login(alice)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert 'id="last-checkpoint"' in page
    job.refresh_from_db()
    assert api(alice).get(f"/api/v1/jobs/{job.pk}/").json()["last_checkpoint_at"] is not None
    node.post(EVENTS.format(job.pk), {"attempt": 1, "type": "exited", "exit_code": 0}, format="json")  # done
    assert 'id="last-checkpoint"' in client.get(f"/jobs/{job.pk}/").content.decode()  # still shown once ended

    victim, preemption = preempted_after_a_checkpoint(alice, node)
    page = client.get(f"/jobs/{victim.pk}/").content.decode()
    credit = -cost(Decimal(repr(preemption.gpu_seconds_lost)), Decimal("4"))
    assert f"{preemption.gpu_seconds_lost:.0f} GPU-s of work lost since" in page
    assert f"in chargeback: {credit} USD" in page and credit < 0
