"""The live scheduling cycle against PostgreSQL: starts, reasons with numbers, single-flight, guards."""

import threading

import pytest
from django.db import IntegrityError, connection, transaction

from scheduler.cycle import run_cycle
from scheduler.models import Allocation, Job
from scheduler.services.common import db_now
from scheduler.services.jobs import job_submit

pytestmark = pytest.mark.django_db


def submit(user, **kw):
    return job_submit(user=user, **{"name": "j", "command": "true", "gpu_model": "h100-80gb", **kw})


def test_it_admits_a_pending_job_onto_concrete_gpus(alice):
    job = submit(alice, gpus=2)
    report = run_cycle()
    assert report.ran and report.started == 1
    job.refresh_from_db()
    assert job.state == "admitted" and job.admitted_at is not None
    allocs = list(Allocation.objects.filter(job=job, ended_at__isnull=True))
    assert len(allocs) == 2 and {a.node.name for a in allocs} == {"node-h100"}
    assert job.transitions.last().to_state == "admitted"


def test_a_job_over_its_team_limit_waits_with_quota_exceeded_and_the_numbers(alice):
    submit(alice, gpus=4)
    over = submit(alice, gpus=1)
    run_cycle()
    over.refresh_from_db()
    assert over.state == "pending"
    assert over.pending_reason_code == "QuotaExceeded"
    assert "4" in over.pending_reason_message and "vision" in over.pending_reason_message
    assert over.pending_reason_details.get("limit") == 4
    assert over.queue_position is not None


def test_a_job_no_node_could_ever_hold_is_marked_unsatisfiable(alice):
    job = submit(alice, gpus=16)
    run_cycle()
    job.refresh_from_db()
    assert job.state == "pending" and job.pending_reason_code == "Unsatisfiable"


def test_running_the_cycle_twice_changes_nothing_more(alice):
    submit(alice, gpus=1)
    run_cycle()
    again = run_cycle()
    assert again.started == 0
    assert Allocation.objects.filter(ended_at__isnull=True).count() == 1


def test_a_held_job_is_skipped_with_reason_held(alice):
    from scheduler.services.jobs import job_hold

    job = job_hold(user=alice, job=submit(alice))
    run_cycle()
    job.refresh_from_db()
    assert job.state == "held" and job.pending_reason_code == "Held"
    assert not Allocation.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_only_one_cycle_runs_at_a_time(alice):
    submit(alice)
    holding = threading.Event()
    release = threading.Event()
    reports = []

    def hold_lock():
        from portal import locks

        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [locks.SCHEDULING_CYCLE])
            holding.set()
            release.wait(10)
        connection.close()

    holder = threading.Thread(target=hold_lock)
    holder.start()
    holding.wait(10)
    try:
        reports.append(run_cycle())
    finally:
        release.set()
        holder.join()
    assert reports[0].ran is False
    assert run_cycle().started == 1


def test_the_database_refuses_a_gpu_in_two_open_exclusive_allocations(alice, cluster):
    job_a, job_b = submit(alice), submit(alice)
    gpu = cluster["nodes"][0].gpus.first()
    now = db_now()
    Allocation.objects.create(job=job_a, attempt=1, gpu=gpu, node=gpu.node, started_at=now)
    with pytest.raises(IntegrityError), transaction.atomic():
        Allocation.objects.create(job=job_b, attempt=1, gpu=gpu, node=gpu.node, started_at=now)


def test_the_database_refuses_shares_of_one_gpu_adding_up_past_one(alice, cluster):
    job_a, job_b, job_c = submit(alice), submit(alice), submit(alice)
    gpu = cluster["nodes"][0].gpus.first()
    now = db_now()
    Allocation.objects.create(job=job_a, attempt=1, gpu=gpu, node=gpu.node, share_milli=500, started_at=now)
    Allocation.objects.create(job=job_b, attempt=1, gpu=gpu, node=gpu.node, share_milli=500, started_at=now)
    with pytest.raises(IntegrityError), transaction.atomic():
        Allocation.objects.create(job=job_c, attempt=1, gpu=gpu, node=gpu.node, share_milli=250, started_at=now)
    Allocation.objects.filter(job=job_a).update(ended_at=db_now())
    Allocation.objects.create(job=job_c, attempt=1, gpu=gpu, node=gpu.node, share_milli=250, started_at=db_now())


def test_a_start_the_database_refuses_changes_nothing(alice, cluster):
    """If a GPU is already held (by anything), the start is refused whole: job stays pending."""
    from scheduler.core.types import Decisions, Placement, Start
    from scheduler.dispatch import persist_decisions

    blocker, job = submit(alice), submit(alice, gpus=2)
    gpus = list(cluster["nodes"][0].gpus.order_by("index"))
    now = db_now()
    Allocation.objects.create(job=blocker, attempt=1, gpu=gpus[1], node=gpus[1].node, started_at=now)
    decisions = Decisions(starts=(Start(job_id=job.pk, placements=(Placement(gpus[0].pk), Placement(gpus[1].pk))),))
    result = persist_decisions(decisions, {g.pk: g for g in gpus}, now)
    assert result.started == 0 and result.refused == 1
    job.refresh_from_db()
    assert job.state == "pending"
    assert not Allocation.objects.filter(job=job).exists()
    assert Job.objects.get(pk=job.pk).transitions.count() == 1


def test_a_team_with_no_pool_access_gets_no_gpus(cluster):
    """Tenancy fails closed in the live snapshot too: a team in no pool's allow-list runs nowhere."""
    from portal.models import Membership
    from tests.factories import MembershipFactory, QuotaFactory, TeamFactory, UserFactory

    outsiders = TeamFactory(name="outsiders")
    QuotaFactory(team=outsiders, gpu_model=cluster["h100"], guaranteed=4, limit=4)
    user = UserFactory(username="olga")
    MembershipFactory(user=user, team=outsiders, role=Membership.MEMBER)
    job = submit(user)
    run_cycle()
    job.refresh_from_db()
    assert job.state == "pending" and job.pending_reason_code == "NoMatchingPool"
