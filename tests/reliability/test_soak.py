"""Soak tier (``make soak``): restarts of the shared Redis and PostgreSQL servers, with a real Celery worker
and a real node agent. They disturb other test runs on this machine, so they never run in ``make test``.
Both servers are always left running. Figures are printed (``pytest -s``)."""

import subprocess
import time

import pytest
from django.db import connection
from django.db.utils import InterfaceError, OperationalError
from rest_framework.test import APIClient

from scheduler import tasks
from scheduler.cycle import run_cycle
from scheduler.models import Job, Node
from scheduler.services.node_jobs import nodes_check_liveness
from tests.processes import wait_for
from tests.reliability.helpers import ContinuousAudit, assert_sound

pytestmark = [pytest.mark.soak, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

REDIS_START = ["redis-server", "--daemonize", "yes", "--bind", "127.0.0.1", "-::1", "--port", "6379",
               "--save", "", "--appendonly", "no"]


def redis_up() -> bool:
    return subprocess.run(["redis-cli", "ping"], capture_output=True, text=True).stdout.strip() == "PONG"


def ensure_redis() -> None:
    if not redis_up():
        subprocess.run(REDIS_START, check=False)
        wait_for(redis_up, timeout=20, what="Redis to start")


def pg_up() -> bool:
    return subprocess.run(["pg_isready", "-h", "localhost", "-p", "5432"], capture_output=True).returncode == 0


def ensure_pg() -> None:
    if not pg_up():
        subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", "15", "main", "start"], check=False)
    wait_for(pg_up, timeout=60, what="PostgreSQL to accept connections")


def db(fn):
    """Call ``fn`` against the database; after a server restart, drop the dead connection and report None."""
    try:
        return fn()
    except (OperationalError, InterfaceError):
        connection.close()
        return None


def state_of(job_id):
    return db(lambda: Job.objects.filter(pk=job_id).values_list("state", flat=True).first())


def api_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture(autouse=True)
def audited(transactional_db):
    """The auditor runs all along each soak test (it reconnects after a database restart)."""
    watch = ContinuousAudit(interval=0.5)
    yield watch
    assert watch.stop() == []


@pytest.fixture
def fast_nodes(settings):
    settings.ROTA_NODE_HEARTBEAT_INTERVAL_S = 1
    settings.ROTA_NODE_HEARTBEAT_TIMEOUT_S = 10


def test_a_redis_restart_loses_no_job_and_scheduling_resumes(alice, cluster, celery_worker, fast_nodes):
    client = api_for(alice)
    first = client.post("/api/v1/jobs/", {"name": "a", "gpu_model": "h100-80gb", "command": "true"},
                        format="json").json()["id"]
    wait_for(lambda: state_of(first) == "admitted", timeout=30, what="the worker to schedule")
    try:
        subprocess.run(["redis-cli", "shutdown", "nosave"], check=False, capture_output=True)
        wait_for(lambda: not redis_up(), timeout=10, what="Redis to stop")
        response = client.post("/api/v1/jobs/", {"name": "b", "gpu_model": "h100-80gb", "command": "true"},
                               format="json")
        print(f"\n[figure] submit while Redis is down: HTTP {response.status_code}")
        assert response.status_code == 201, response.content  # the wake-up is a hint: the job is saved
        second = response.json()["id"]
        assert state_of(second) == "pending"
    finally:
        ensure_redis()
    restarted = time.monotonic()

    def beat():
        try:
            tasks.run_cycle.delay()
        except Exception:  # noqa: BLE001 - the producer reconnects on a later tick
            pass
        return state_of(second) == "admitted"

    wait_for(beat, timeout=60, interval=1.0, what="scheduling to resume after the Redis restart")
    print(f"[figure] scheduling resumed {time.monotonic() - restarted:.2f} s after Redis came back")
    assert_sound()


def test_a_postgresql_restart_loses_no_job_and_scheduling_resumes(alice, cluster, celery_worker, start_agent,
                                                                  fast_nodes):
    node = cluster["nodes"][0]
    start_agent(node)
    wait_for(lambda: Node.objects.get(pk=node.pk).registered_at, what="the agent to register")
    client = api_for(alice)
    running = client.post("/api/v1/jobs/", {"name": "long", "gpu_model": "h100-80gb", "command": "sleep 600"},
                          format="json").json()["id"]
    wait_for(lambda: (run_cycle() and state_of(running) == "running"), timeout=45, what="the job to run")
    try:
        subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", "15", "main", "restart"], check=True,
                       timeout=120)
    finally:
        ensure_pg()
    restarted = time.monotonic()
    connection.close()

    def submitted():
        try:
            response = client.post("/api/v1/jobs/", {"name": "after", "gpu_model": "h100-80gb",
                                                     "command": "echo ok"}, format="json")
        except (OperationalError, InterfaceError):
            connection.close()
            return None
        return response.json()["id"] if response.status_code == 201 else None

    after = wait_for(submitted, timeout=60, interval=0.5, what="the API to accept a job again")
    accepting = time.monotonic() - restarted

    def beat():
        db(nodes_check_liveness)
        try:
            tasks.run_cycle.delay()
        except Exception:  # noqa: BLE001
            pass
        return state_of(after) == "succeeded"

    wait_for(beat, timeout=90, interval=1.0, what="a job submitted after the restart to run to the end")
    print(f"\n[figure] PostgreSQL restart: API accepting jobs after {accepting:.2f} s; a new job ran to "
          f"success {time.monotonic() - restarted:.2f} s after the restart")
    assert state_of(running) in ("running", "pending", "admitted", "starting")  # kept or requeued, never lost
    assert_sound()
