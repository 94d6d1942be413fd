"""Fault injection in one process, on the real PostgreSQL: racing and paused cycles, stale decisions,
duplicate and lost deliveries, dropped database connections, silent and returning nodes, time limits and
clock skew. Each test ends with the auditor finding nothing; recovery figures are printed (``-s``)."""

import threading
import time
from datetime import timedelta
from unittest import mock

import pytest
from django.db import OperationalError, connection, transaction

from scheduler import cycle as cycle_module
from scheduler import tasks
from scheduler.core import schedule
from scheduler.cycle import run_cycle
from scheduler.dispatch import persist_decisions
from scheduler.models import Allocation, GpuSample, Job, Node
from scheduler.services.common import db_now
from scheduler.services.jobs import job_cancel
from scheduler.services.node_jobs import node_job_event, nodes_check_liveness
from scheduler.services.nodes import NodeProtocolError, node_assignments, node_heartbeat, node_register
from scheduler.snapshot import build_snapshot
from tests.processes import wait_for
from tests.reliability.helpers import Stopwatch, assert_sound, cycle_lock_held, run_on_node, state_of, submit

pytestmark = pytest.mark.django_db(transaction=True)

REGISTER = {"gpus": [{"index": i, "uuid": f"GPU-h100-{i}", "model": "h100-80gb", "memory_mb": 81559}
                     for i in range(4)]}


def in_thread(target, *args):
    """Run ``target`` in a thread with its own database connection; return (thread, results, errors)."""
    results, errors = [], []

    def body():
        try:
            results.append(target(*args))
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread, results, errors


def test_racing_cycles_admit_every_job_once(alice, charlie):
    for _ in range(6):
        submit(alice)
    for _ in range(4):
        submit(charlie)
    barrier = threading.Barrier(6)

    def race():
        reports = []
        for _ in range(5):
            barrier.wait(10)
            reports.append(run_cycle())
        return reports

    threads = [in_thread(race) for _ in range(6)]
    for thread, _, errors in threads:
        thread.join(60)
        assert not errors, errors
    reports = [r for _, results, _ in threads for r in results[0]]
    ran = [r for r in reports if r.ran]
    assert ran and len(ran) < len(reports)  # single-flight: the losers returned at once
    assert sum(r.started for r in ran) == Allocation.objects.values("job").distinct().count()
    # vision may hold 4 h100, nlp 2: every GPU of the h100 node is held exactly once
    assert Allocation.objects.filter(ended_at__isnull=True).count() == 4
    print(f"\n[figure] racing cycles: {len(reports)} calls, {len(ran)} ran, "
          f"{sum(r.refused for r in ran)} starts refused by guards")
    assert_sound()


def test_a_paused_cycle_resuming_late_starts_nothing_stale(alice):
    job = submit(alice)
    decided, resume = threading.Event(), threading.Event()

    def slow_schedule(snapshot):
        decisions = schedule(snapshot)
        decided.set()
        resume.wait(20)  # the cycle is paused here (a GC pause, a stalled worker) holding the lock
        return decisions

    with mock.patch.object(cycle_module, "schedule", slow_schedule):
        thread, results, errors = in_thread(run_cycle)
        assert decided.wait(20)
        watch = time.monotonic()
        assert run_cycle().ran is False  # single-flight: answered at once
        assert time.monotonic() - watch < 1
        job_cancel(user=alice, job=job)  # the world moves on while the cycle sleeps
        resume.set()
        thread.join(30)
    assert not errors, errors
    assert results[0].ran and results[0].started == 0 and results[0].refused == 1
    assert state_of(job.pk) == "cancelled" and not Allocation.objects.filter(job=job).exists()
    assert_sound()


def test_decisions_from_an_old_snapshot_are_refused_by_the_guards(alice, charlie):
    a, b = submit(alice, gpus=2), submit(charlie, gpus=2)
    with transaction.atomic():
        snapshot, gpu_nodes = build_snapshot(db_now())
    stale = schedule(snapshot)
    assert len(stale.starts) == 2
    assert run_cycle().started == 2  # a newer cycle already acted
    late = submit(alice, gpus=2)  # and a new job waits; the stale decisions know nothing of it
    with transaction.atomic():
        result = persist_decisions(stale, gpu_nodes, db_now())
    assert result.started == 0 and result.refused == 2
    assert Allocation.objects.filter(ended_at__isnull=True).count() == 4
    assert {state_of(a.pk), state_of(b.pk), state_of(late.pk)} == {"admitted", "pending"}
    assert_sound()


def test_duplicate_deliveries_change_nothing_twice(alice, cluster):
    node = cluster["nodes"][0]
    job = submit(alice, gpus=2)
    tasks.run_cycle()
    tasks.run_cycle()  # the same message delivered twice
    assert Allocation.objects.filter(job=job).count() == 2
    run_on_node(node, job, 1)
    event = {"type": "exited", "attempt": 1, "exit_code": 0}
    node_job_event(node=node, job_id=job.pk, event=event)
    held = Job.objects.get(pk=job.pk).attained_gpu_seconds
    node_job_event(node=node, job_id=job.pk, event=event)  # the agent resends an event it got no answer to
    node_job_event(node=node, job_id=job.pk, event={"type": "started", "attempt": 1})  # and a stale start
    job.refresh_from_db()
    assert job.state == "succeeded" and job.attained_gpu_seconds == held
    assert list(job.transitions.values_list("to_state", flat=True)) == [
        "pending", "admitted", "starting", "running", "succeeded"]
    with pytest.raises(NodeProtocolError):
        node_heartbeat(node=node, report={"seq": 1})  # a replayed heartbeat is refused, not applied
    assert tasks.node_liveness() == [] and tasks.node_liveness() == []
    assert_sound(rollup=True)


def test_a_lost_wake_up_is_recovered_by_the_next_periodic_cycle(alice):
    with mock.patch("scheduler.tasks.run_cycle.delay_on_commit") as lost:
        job = submit(alice)
    assert lost.called and state_of(job.pk) == "pending"
    watch = Stopwatch("lost wake-up recovered by the next periodic cycle (beat would call it)")
    tasks.run_cycle()
    assert state_of(job.pk) == "admitted"
    watch.stop()
    assert_sound()


def test_a_dropped_database_connection_mid_cycle_rolls_back_and_the_next_cycle_recovers(alice):
    job = submit(alice)
    decided, resume = threading.Event(), threading.Event()
    pids = []

    def slow_schedule(snapshot):
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            pids.append(cursor.fetchone()[0])
        decided.set()
        resume.wait(20)
        return schedule(snapshot)

    with mock.patch.object(cycle_module, "schedule", slow_schedule):
        thread, results, errors = in_thread(run_cycle)
        assert decided.wait(20)
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pids[0]])
        watch = Stopwatch("scheduling resumed after the cycle's connection was dropped")
        resume.set()
        thread.join(30)
    assert errors and isinstance(errors[0], OperationalError)
    assert state_of(job.pk) == "pending" and not Allocation.objects.exists()  # nothing half-written
    wait_for(lambda: not cycle_lock_held(), timeout=10, what="the advisory lock to die with the connection")
    assert run_cycle().started == 1
    watch.stop()
    assert_sound()


def running_on(node, user, **kw):
    """A job of ``user`` started on ``node`` (registered first), as its agent would report it."""
    node_register(node=node, report=REGISTER)
    job = submit(user, **kw)
    run_cycle()
    run_on_node(node, job, 1)
    return job


def go_quiet(node) -> None:
    """``node`` has sent nothing for longer than the heartbeat timeout (5 s in these tests)."""
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=db_now() - timedelta(seconds=6))


def test_a_silent_node_goes_down_its_jobs_requeue_and_on_return_old_attempts_are_refused(
    alice, cluster, settings
):
    settings.ROTA_NODE_HEARTBEAT_TIMEOUT_S = 5
    node = cluster["nodes"][0]
    job = running_on(node, alice, gpus=2)
    assert state_of(job.pk) == "running"
    go_quiet(node)
    assert nodes_check_liveness() == [node.name]
    job.refresh_from_db()
    assert job.state == "pending" and job.attempt == 2
    assert not Allocation.objects.filter(ended_at__isnull=True).exists()
    assert_sound()
    node.refresh_from_db()
    with pytest.raises(NodeProtocolError) as refused:
        node_heartbeat(node=node, report={"seq": 2})
    assert refused.value.status == 409  # "register again"
    node_register(node=node, report=REGISTER)
    node.refresh_from_db()
    assert node.state == "ready"
    with pytest.raises(NodeProtocolError) as stale:  # the orphan of attempt 1 reports late
        node_job_event(node=node, job_id=job.pk, event={"type": "exited", "attempt": 1, "exit_code": 0})
    assert stale.value.status == 409
    assert node_assignments(node) == []  # attempt 1 is not assigned: the agent kills what it still runs
    run_cycle()
    assert [(a["job_id"], a["attempt"]) for a in node_assignments(node)] == [(job.pk, 2)]
    assert_sound(rollup=True)


def test_a_job_past_its_time_limit_is_stopped_and_ends_timed_out(alice, cluster):
    node = cluster["nodes"][0]
    job = submit(alice, time_limit_minutes=1)
    run_cycle()
    run_on_node(node, job, 1)
    Job.objects.filter(pk=job.pk).update(started_at=db_now() - timedelta(minutes=2))
    assert run_cycle().timed_out == 1
    assert node_assignments(node)[0]["desired"] == "stopped"
    node_job_event(node=node, job_id=job.pk, event={"type": "stopped", "attempt": 1, "signal": 15})
    assert state_of(job.pk) == "timed-out"
    assert_sound(rollup=True)


def test_telemetry_from_a_node_with_a_skewed_clock_lands_on_the_portal_clock(alice, cluster, settings):
    settings.ROTA_NODE_HEARTBEAT_TIMEOUT_S = 30
    node = cluster["nodes"][0]
    node_register(node=node, report=REGISTER)
    now = db_now()
    for seq, skew in ((1, timedelta(days=3)), (2, -timedelta(days=400))):
        node.refresh_from_db()
        node_heartbeat(node=node, report={"seq": seq, "telemetry": [
            {"uuid": "GPU-h100-0", "at": now + skew, "util_pct": 50.0}]})
    samples = list(GpuSample.objects.values_list("at", flat=True))
    assert len(samples) == 2 and all(abs((at - now).total_seconds()) < 30 for at in samples)
    assert nodes_check_liveness() == []  # liveness is judged by the portal's clock, not the node's
    assert Node.objects.get(pk=node.pk).state == "ready"
    assert_sound()


def test_a_cancel_asked_before_the_node_went_silent_ends_the_job_cancelled(alice, cluster, settings):
    settings.ROTA_NODE_HEARTBEAT_TIMEOUT_S = 5
    node = cluster["nodes"][0]
    job = running_on(node, alice, gpus=1)
    job_cancel(user=alice, job=job)  # the node never confirms: it has gone quiet
    go_quiet(node)
    assert nodes_check_liveness() == [node.name]
    job.refresh_from_db()
    assert (job.state, job.attempt) == ("cancelled", 1)  # not requeued to run again
    assert not Allocation.objects.filter(ended_at__isnull=True).exists()
    run_cycle()
    assert state_of(job.pk) == "cancelled"
    assert_sound()


def test_a_gang_that_loses_one_node_keeps_its_other_devices_until_that_node_confirms_the_stop(
    alice, cluster, settings
):
    from tests.factories import GpuFactory, NodeFactory

    settings.ROTA_NODE_HEARTBEAT_TIMEOUT_S = 5
    lost, kept = cluster["nodes"][0], NodeFactory(name="node-h100-b", pool=cluster["pool"])
    for i in range(4):
        GpuFactory(node=kept, index=i, model=cluster["h100"], memory_mb=81559, uuid=f"GPU-h100-b{i}")
    node_register(node=lost, report=REGISTER)
    node_register(node=kept, report={"gpus": [{**g, "uuid": g["uuid"].replace("h100-", "h100-b")}
                                              for g in REGISTER["gpus"]]})
    cluster["vision"].quotas.filter(gpu_model=cluster["h100"]).update(limit=8)
    gang = submit(alice, gpus=8, nodes=2)
    run_cycle()
    assert set(Allocation.objects.filter(job=gang).values_list("node__name", flat=True)) == {lost.name, kept.name}
    for node in (lost, kept):
        node_heartbeat(node=node, report={"seq": 1})
        node_job_event(node=node, job_id=gang.pk, event={"type": "started", "attempt": 1, "pid": 1})
    go_quiet(lost)
    assert nodes_check_liveness() == [lost.name]
    gang.refresh_from_db()
    # The healthy node's devices stay held (its processes still run there) and it is told to stop them.
    assert gang.state == "running" and gang.stop_reason == "node-unhealthy"
    assert set(Allocation.objects.filter(job=gang, ended_at__isnull=True).values_list("node__name", flat=True)) == {
        kept.name}
    other = submit(alice, gpus=4)
    run_cycle()
    assert state_of(other.pk) == "pending"  # nothing is placed on the devices the gang still holds
    assert_sound()
    node_job_event(node=kept, job_id=gang.pk, event={"type": "stopped", "attempt": 1, "signal": 15})
    gang.refresh_from_db()
    assert (gang.state, gang.attempt) == ("pending", 2)
    assert not Allocation.objects.filter(job=gang, ended_at__isnull=True).exists()
    assert_sound()
