"""The invariant auditor: sound after normal work, and each check catches a deliberately corrupted state
(written with raw SQL or queryset updates that bypass the services)."""

import json
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.db import connection

from accounting.models import UsageRecord
from scheduler.audit import audit
from scheduler.cycle import run_cycle
from scheduler.models import Allocation, Job, JobTransition, Quota
from tests.reliability.helpers import assert_sound, finish_on_node, run_on_node, submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def busy(alice, cluster):
    """A sound, busy state: one job finished, one running on 2 GPUs, one admitted, one pending, ledger rolled."""
    node = cluster["nodes"][0]
    done, running = submit(alice, gpus=1), submit(alice, gpus=2)
    run_cycle()
    seq = run_on_node(node, done, 1)
    running.refresh_from_db()
    seq = run_on_node(node, running, seq)
    finish_on_node(node, done)
    admitted = submit(alice, gpus=1)
    waiting = submit(alice, gpus=4)
    run_cycle()
    return {"node": node, "done": done, "running": running, "admitted": admitted, "waiting": waiting,
            "seq": seq}


def sql(statement: str, params=None) -> None:
    with connection.cursor() as cursor:
        cursor.execute(statement, params or [])


def findings_of(check: str) -> list[str]:
    return [line for line in audit() if line.startswith(check + ":")]


def test_it_finds_nothing_in_a_sound_busy_state(busy):
    assert Job.objects.get(pk=busy["admitted"].pk).state == "admitted"
    assert Job.objects.get(pk=busy["running"].pk).state == "running"
    assert Job.objects.get(pk=busy["done"].pk).state == "succeeded"
    assert Job.objects.get(pk=busy["waiting"].pk).state == "pending"
    assert_sound(rollup=True)


def test_it_finds_a_gpu_in_two_open_exclusive_allocations(busy):
    sql("DROP INDEX alloc_one_open_exclusive_per_gpu")  # the database guard, removed to corrupt on purpose
    sql("SET LOCAL session_replication_role = replica")  # triggers off: the share guard too
    held = Allocation.objects.filter(job=busy["running"], ended_at__isnull=True).first()
    Allocation.objects.create(job=busy["done"], attempt=2, gpu=held.gpu, node=held.node, started_at=held.started_at)
    assert any("2 open exclusive allocations" in line for line in findings_of("gpus"))


def test_it_finds_shares_of_one_gpu_over_1000(busy):
    sql("SET LOCAL session_replication_role = replica")  # triggers off: the share guard too
    gpu = busy["node"].gpus.get(index=3)
    for job in (busy["done"], busy["waiting"]):
        Allocation.objects.create(job=job, attempt=9, gpu=gpu, node=gpu.node, share_milli=600,
                                  started_at=job.created_at)
    assert any("shares sum to 1200/1000" in line for line in findings_of("gpus"))


def test_it_finds_an_allocation_on_another_node_than_its_gpu(busy, cluster):
    Allocation.objects.filter(job=busy["running"]).update(node=cluster["nodes"][1])
    assert any("belongs to node" in line for line in findings_of("nodes"))


def test_it_finds_a_node_over_its_gpu_capacity(busy, cluster):
    sql("SET LOCAL session_replication_role = replica")  # triggers off: the share guard too
    a100 = cluster["nodes"][1]
    gpu = a100.gpus.first()
    held = Allocation.objects.filter(job=busy["running"], ended_at__isnull=True)
    held.update(node=a100)  # 2 exclusive GPUs' worth now counted on the a100 node...
    Allocation.objects.create(job=busy["admitted"], attempt=5, gpu=gpu, node=a100, share_milli=500,
                              started_at=gpu.node.registered_at or busy["admitted"].created_at)
    assert any("node node-a100: open shares 2500/1000 exceed its 2 GPUs" in line for line in findings_of("nodes"))


def test_it_finds_a_team_above_its_limit(busy, cluster):
    Quota.objects.filter(team=cluster["vision"], gpu_model=cluster["h100"]).update(guaranteed=1, limit=Decimal(2))
    assert findings_of("quotas") == ["quotas: team vision: holds 3 h100-80gb, over its limit 2.000"]


def test_a_parent_team_limit_covers_its_children(busy, cluster):
    from tests.factories import QuotaFactory, TeamFactory

    dept = TeamFactory(name="research")
    cluster["vision"].parent = dept
    cluster["vision"].save()
    QuotaFactory(team=dept, gpu_model=cluster["h100"], guaranteed=1, limit=Decimal(1))
    assert any("team research: holds 3 h100-80gb" in line for line in findings_of("quotas"))


def test_it_finds_a_state_that_disagrees_with_the_history(busy):
    Job.objects.filter(pk=busy["waiting"].pk).update(state="running")
    lines = findings_of("jobs")
    assert f"jobs: job {busy['waiting'].pk}: state running but its last transition went to pending" in lines


def test_it_finds_a_history_that_skips_states_or_breaks_the_chain(busy):
    JobTransition.objects.create(job=busy["waiting"], from_state="pending", to_state="succeeded",
                                 at=busy["waiting"].created_at, cause="corrupt")
    JobTransition.objects.create(job=busy["done"], from_state="running", to_state="succeeded",
                                 at=busy["done"].created_at, cause="corrupt")
    lines = "\n".join(findings_of("jobs"))
    assert f"job {busy['waiting'].pk}: transition pending→succeeded is not allowed" in lines
    assert f"job {busy['done'].pk}: transition running→succeeded does not follow succeeded" in lines


def test_it_finds_a_job_without_history_and_a_final_job_without_finished_at(busy):
    JobTransition.objects.filter(job=busy["waiting"]).delete()
    Job.objects.filter(pk=busy["done"].pk).update(finished_at=None)
    lines = findings_of("jobs")
    assert f"jobs: job {busy['waiting'].pk}: pending with no recorded transitions" in lines
    assert f"jobs: job {busy['done'].pk}: succeeded but no finished_at" in lines


def test_it_finds_open_allocations_of_finished_and_waiting_jobs(busy):
    sql("SET LOCAL session_replication_role = replica")  # triggers off: the share guard too
    Allocation.objects.filter(job=busy["admitted"]).update(ended_at=busy["admitted"].created_at + timedelta(hours=1))
    Allocation.objects.filter(job=busy["done"]).update(ended_at=None)  # its GPU went to "admitted", now closed
    gpu = busy["node"].gpus.get(index=3)
    Allocation.objects.create(job=busy["waiting"], attempt=1, gpu=gpu, node=gpu.node, share_milli=10,
                              started_at=busy["waiting"].created_at)
    lines = "\n".join(findings_of("allocations"))
    assert f"job {busy['done'].pk}: succeeded with open allocation" in lines
    assert f"job {busy['waiting'].pk}: pending with open allocation" in lines
    assert f"job {busy['admitted'].pk}: admitted (attempt 1) without an open allocation" in lines


def test_it_finds_an_open_allocation_of_a_stale_attempt(busy):
    Job.objects.filter(pk=busy["running"].pk).update(attempt=2)
    lines = "\n".join(findings_of("allocations"))
    assert f"job {busy['running'].pk}: open allocation" in lines and "the job is on attempt 2" in lines


def test_it_finds_an_interval_that_ends_before_it_starts(busy):
    sql("SET CONSTRAINTS ALL IMMEDIATE")
    sql("ALTER TABLE scheduler_allocation DROP CONSTRAINT alloc_interval_ordered")
    alloc = Allocation.objects.filter(job=busy["done"]).first()
    Allocation.objects.filter(pk=alloc.pk).update(ended_at=alloc.started_at - timedelta(seconds=5))
    assert any(f"allocation {alloc.pk} of job {busy['done'].pk}: ends" in line for line in findings_of("allocations"))


def test_it_finds_a_ledger_that_differs_from_the_allocations(busy):
    from accounting.services import usage_rollup

    usage_rollup()
    assert findings_of("ledger") == []
    UsageRecord.objects.filter(pk=UsageRecord.objects.first().pk).update(gpu_seconds=Decimal("99999"))
    lines = findings_of("ledger")
    assert len(lines) == 1 and "difference" in lines[0]


def test_the_command_exits_1_with_findings_and_prints_json(busy, capsys):
    call_command("audit_invariants", "--json")
    assert json.loads(capsys.readouterr().out)["ok"] is True
    Job.objects.filter(pk=busy["waiting"].pk).update(state="running")
    with pytest.raises(SystemExit) as exited:
        call_command("audit_invariants", "--json")
    assert exited.value.code == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and any("state running" in line for line in report["findings"])


@pytest.mark.django_db(transaction=True)
def test_the_auditor_reads_one_snapshot_while_others_commit(alice, cluster, monkeypatch):
    """A job that moves on between the auditor's read of jobs and its read of transitions must not look
    broken: every check reads the same snapshot of the database."""
    import threading

    from django.db import connections, transaction
    from django.utils import timezone

    from scheduler import audit as audit_module

    job = submit(alice, gpus=1)

    def hold_it():
        # Another connection moves the job on (state and transition in one commit, as the services do).
        try:
            with transaction.atomic():
                Job.objects.filter(pk=job.pk).update(state="held")
                JobTransition.objects.create(job_id=job.pk, from_state="pending", to_state="held", at=timezone.now())
        finally:
            connections.close_all()

    real_rows = audit_module._rows

    def rows_with_a_commit_before_transitions(statement, params=None):
        if "FROM scheduler_jobtransition" in statement and not moved:
            moved.append(True)
            thread = threading.Thread(target=hold_it)
            thread.start()
            thread.join()
        return real_rows(statement, params)

    moved: list[bool] = []
    monkeypatch.setattr(audit_module, "_rows", rows_with_a_commit_before_transitions)
    assert audit(ledger=False) == []
    assert moved and Job.objects.get(pk=job.pk).state == "held"  # the commit did land in between


def test_it_finds_lost_work_beyond_what_the_attempt_held_and_a_checkpoint_in_the_future(busy):
    from scheduler.models import Preemption

    job = busy["done"]  # held 1 GPU for its attempt, which ended
    alloc = Allocation.objects.get(job=job)
    held = (alloc.ended_at - alloc.started_at).total_seconds()
    preemption = Preemption.objects.create(job=job, attempt=1, reason="Priority", message="m", at=alloc.started_at,
                                           work_since=alloc.started_at, completed_at=alloc.ended_at,
                                           gpu_seconds_lost=held)
    assert findings_of("lost_work") == []
    Preemption.objects.filter(pk=preemption.pk).update(gpu_seconds_lost=held + 10)
    assert any("GPU-s lost, but attempt 1 held" in line for line in findings_of("lost_work"))
    running = Job.objects.get(pk=busy["running"].pk)
    Job.objects.filter(pk=running.pk).update(last_checkpoint_at=running.started_at + timedelta(days=1))
    assert any(f"job {running.pk}: checkpoint" in line for line in findings_of("lost_work"))
