"""Fault injection with real processes (a Celery worker, node agents running real job processes) on the
real PostgreSQL and Redis: a worker SIGKILLed mid-cycle, a node agent frozen (SIGSTOP) and thawed
(SIGCONT), a job that ignores SIGTERM. The test loop plays Celery beat (periodic cycles and liveness), so
recovery times do not depend on a beat process. Figures are printed (``pytest -s``)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
import redis
from django.conf import settings
from django.db import connection
from rest_framework.test import APIClient

from scheduler import tasks
from scheduler.cycle import run_cycle
from scheduler.models import Allocation, Job, Node
from scheduler.models.jobs import JobState
from scheduler.services.node_jobs import nodes_check_liveness
from tests.processes import ROOT, _stop, wait_for
from tests.reliability.helpers import ContinuousAudit, Stopwatch, assert_sound, backlog, cycle_lock_held, state_of

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def fast_nodes(settings):
    settings.ROTA_NODE_HEARTBEAT_INTERVAL_S = 1
    settings.ROTA_NODE_HEARTBEAT_TIMEOUT_S = 4


@pytest.fixture(autouse=True)
def audited(transactional_db):
    """The auditor runs all along each fault test; any finding at any instant fails the test."""
    watch = ContinuousAudit()
    yield watch
    assert watch.stop() == []


@pytest.fixture
def spawn_worker(worker_env, tmp_path):
    """Start real Celery workers (more than one over a test); all are stopped at the end."""
    redis.Redis.from_url(settings.CELERY_BROKER_URL).flushdb()
    procs = []

    def spawn():
        log = open(tmp_path / f"worker-{len(procs)}.log", "w")
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "portal", "worker", "--pool=solo", "--loglevel=INFO",
             "--without-gossip", "--without-mingle", "--without-heartbeat"],
            cwd=ROOT, env=worker_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        procs.append((proc, log))
        return proc

    yield spawn
    for proc, log in procs:
        _stop(proc)
        log.close()


def pid_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def api_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def _waiting_on_a_row_lock() -> int:
    """How many sessions of this test database wait for a lock (here: the cycle, for the target's row)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                       "AND wait_event_type = 'Lock'")
        return cursor.fetchone()[0]


def test_a_worker_killed_mid_cycle_leaves_nothing_half_done_and_a_new_worker_resumes(
    alice, cluster, spawn_worker
):
    backlog(alice, cluster["vision"], 4000)
    target = api_for(alice).post("/api/v1/jobs/", {"name": "t", "gpu_model": "h100-80gb", "command": "true"},
                                 format="json").json()["id"]
    db = connection.settings_dict
    # The target's row is held by another session, so the cycle that admits it waits before its commit, holding the
    # advisory lock: the kill lands mid-cycle for certain, not after a quick cycle's commit.
    with psycopg.connect(host=db["HOST"] or "localhost", port=db["PORT"] or 5432, user=db["USER"] or "postgres",
                         dbname=db["NAME"], autocommit=False) as holder:
        holder.execute("SELECT 1 FROM scheduler_job WHERE id = %s FOR UPDATE", [target])
        first = spawn_worker()
        tasks.run_cycle.delay()
        wait_for(lambda: cycle_lock_held() and _waiting_on_a_row_lock() == 1, timeout=60, interval=0.02,
                 what="a cycle holding the advisory lock, waiting for the target's row")
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(10)
        killed = time.monotonic()
        holder.rollback()
    wait_for(lambda: not cycle_lock_held(), timeout=30, interval=0.05, what="the dead cycle's lock to go")
    released = time.monotonic() - killed
    assert state_of(target) == "pending" and not Allocation.objects.exists()  # the killed cycle rolled back
    assert_sound()
    spawn_worker()
    tasks.run_cycle.delay()  # the next beat tick: the killed task's message is not redelivered for an hour
    wait_for(lambda: state_of(target) == "admitted", timeout=60, interval=0.1, what="a new worker's cycle")
    recovered = time.monotonic() - killed
    print(f"\n[figure] worker SIGKILLed mid-cycle (4000-job backlog): advisory lock released after "
          f"{released:.2f} s; scheduling resumed on a new worker after {recovered:.2f} s")
    assert recovered < 60
    assert_sound()


def test_a_frozen_node_goes_down_its_job_requeues_and_on_thaw_the_orphan_is_killed(
    alice, cluster, start_agent, fast_nodes, team_dir
):
    node = cluster["nodes"][0]
    agent = start_agent(node)
    wait_for(lambda: Node.objects.get(pk=node.pk).registered_at, what="the agent to register")
    pids = team_dir(cluster["vision"]) / "pids"
    job_id = api_for(alice).post("/api/v1/jobs/", {
        "name": "long", "gpu_model": "h100-80gb", "gpus": 2, "command": f"echo $$ >> {pids}; exec sleep 300",
    }, format="json").json()["id"]

    def beat(until, what, timeout=30.0):
        def tick():
            nodes_check_liveness()
            run_cycle()
            return until()
        return wait_for(tick, timeout=timeout, interval=0.25, what=what)

    beat(lambda: state_of(job_id) == "running" and pids.exists() and pids.read_text().split(), "the job to run")
    orphan = int(pids.read_text().split()[0])
    os.kill(agent.pid, signal.SIGSTOP)
    frozen = Stopwatch("frozen node marked down and its job requeued (heartbeat timeout 4 s)")
    beat(lambda: Node.objects.get(pk=node.pk).state == Node.DOWN, "the node to be marked down")
    frozen.stop()
    job = Job.objects.get(pk=job_id)
    assert job.state == JobState.PENDING and job.attempt == 2
    assert not Allocation.objects.filter(ended_at__isnull=True).exists()
    assert_sound()
    assert pid_alive(orphan)  # the frozen node still runs attempt 1
    os.kill(agent.pid, signal.SIGCONT)
    thaw = time.monotonic()
    thawed = Stopwatch("thawed node re-registered (ready)")
    beat(lambda: Node.objects.get(pk=node.pk).state == Node.READY, "the node to re-register")
    thawed.stop()
    killed = Stopwatch("orphan of attempt 1 killed after the thaw")
    wait_for(lambda: not pid_alive(orphan), timeout=30, what="the orphaned attempt to be killed")
    killed.stop()
    beat(lambda: Job.objects.filter(pk=job_id, state=JobState.RUNNING, attempt=2).exists(),
         "attempt 2 to run on the returned node")
    print(f"[figure] requeued job running again {time.monotonic() - thaw:.2f} s after the thaw")
    # "running" means the agent spawned attempt 2; its shell writes its pid a moment later.
    wait_for(lambda: len(pids.read_text().split()) == 2, timeout=10, what="attempt 2's process to start")
    assert Allocation.objects.filter(ended_at__isnull=True, job_id=job_id, attempt=2).count() == 2
    assert_sound()


def test_a_job_that_ignores_sigterm_is_sigkilled_after_its_grace_period(alice, cluster, start_agent, fast_nodes,
                                                                        team_dir):
    node = cluster["nodes"][0]
    start_agent(node)
    pidfile = team_dir(cluster["vision"]) / "stubborn.pid"
    client = api_for(alice)
    job_id = client.post("/api/v1/jobs/", {
        "name": "stubborn", "gpu_model": "h100-80gb",
        "command": f"trap '' TERM; echo $$ > {pidfile}; while true; do sleep 0.2; done",
    }, format="json").json()["id"]
    wait_for(lambda: (run_cycle() and state_of(job_id) == "running" and pidfile.exists()
                      and pidfile.read_text().strip()), timeout=30,
             interval=0.25, what="the stubborn job to run")
    grace = Job.objects.get(pk=job_id).priority_class.grace_period_s
    assert client.post(f"/api/v1/jobs/{job_id}/cancel/").status_code == 200
    watch = time.monotonic()
    wait_for(lambda: state_of(job_id) == "cancelled", timeout=grace + 20, what="the job to be cancelled")
    took = time.monotonic() - watch
    print(f"\n[figure] SIGTERM-ignoring job cancelled after {took:.2f} s (grace period {grace} s)")
    assert took >= grace
    assert not pid_alive(int(pidfile.read_text()))
    final = Job.objects.get(pk=job_id).transitions.last()
    assert final.details.get("exit_code") is None or final.details["exit_code"] != 0
    assert_sound()
