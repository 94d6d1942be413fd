"""Real processes for end-to-end tests: a Celery worker on the test database and Redis, and node agents
(fake GPU backend) talking to pytest-django's live server."""

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.db import connection

from scheduler.models import NodeToken

ROOT = Path(__file__).resolve().parents[1]  # the repository


def _stop(proc: subprocess.Popen, timeout: float = 10) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def wait_for(predicate, timeout: float = 30.0, interval: float = 0.2, what: str = "condition"):
    """Poll ``predicate`` until it returns something truthy; fail with ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


# Where tests look for service ports: above the kernel's ephemeral range (32768-60999 by default, which outgoing
# connections take) and away from a site's ROTA_SERVICE_PORTS (30000-30999), which `make dev` publishes on.
TEST_SERVICE_PORTS = range(61000, 65536)
SERVICE_PORT_BLOCK = 32


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("0.0.0.0", port))  # refused when anything on any address holds the port
        except OSError:
            return False
    return True


def free_service_ports(tries: int = 50) -> tuple[int, int]:
    """A block of SERVICE_PORT_BLOCK ports, all free now, for this test's notebooks and inference replicas: a
    `make dev` or another test run on this machine uses its own."""
    blocks = range(TEST_SERVICE_PORTS.start, TEST_SERVICE_PORTS.stop - SERVICE_PORT_BLOCK, SERVICE_PORT_BLOCK)
    for low in random.SystemRandom().sample(blocks, tries):  # not the test's seeded random: runs differ
        if all(_bindable(p) for p in range(low, low + SERVICE_PORT_BLOCK)):
            return low, low + SERVICE_PORT_BLOCK - 1
    raise AssertionError(f"no block of {SERVICE_PORT_BLOCK} free ports in {tries} tries")


@pytest.fixture
def service_ports(settings) -> tuple[int, int]:
    """ROTA_SERVICE_PORTS for this test, in this process and (through worker_env) its worker and agents."""
    settings.ROTA_SERVICE_PORTS = free_service_ports()
    return settings.ROTA_SERVICE_PORTS


@pytest.fixture
def worker_env(transactional_db, service_ports):
    """The environment a subprocess needs to use the same test database and Redis as this test, and service
    ports of its own."""
    db = connection.settings_dict
    env = dict(os.environ)
    user, host, port = db["USER"] or "postgres", db["HOST"] or "localhost", db["PORT"] or 5432
    env["DATABASE_URL"] = f"postgres://{user}@{host}:{port}/{db['NAME']}"
    env["REDIS_URL"] = settings.CELERY_BROKER_URL
    env["PYTHONUNBUFFERED"] = "1"
    env["ROTA_SERVICE_PORTS"] = "{}-{}".format(*service_ports)
    return env


@pytest.fixture
def celery_worker(worker_env, tmp_path):
    """A real Celery worker process consuming from the test Redis database."""
    redis.Redis.from_url(settings.CELERY_BROKER_URL).flushdb()
    log = open(tmp_path / "worker.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "portal", "worker", "--pool=solo", "--loglevel=INFO",
         "--without-gossip", "--without-mingle", "--without-heartbeat"],
        cwd=ROOT, env=worker_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    yield proc
    _stop(proc)
    log.close()


@pytest.fixture
def team_dir():
    """A directory a job of ``team`` may write into, for a test to read what the job left there. An agent run
    as root starts each job as its team's uid, which cannot enter pytest's tmp dirs (owner only): this one
    is the team's own (its uid, mode 0700) in /tmp, removed at the end."""
    made = []

    def make(team) -> Path:
        path = Path(tempfile.mkdtemp(prefix=f"{team.name}-", dir="/tmp"))
        made.append(path)
        if os.geteuid() == 0:
            os.chown(path, team.unix_id, team.unix_id)
        return path

    yield make
    for path in made:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def start_agent(live_server, tmp_path, worker_env):
    """Start a real node-agent process for a node (fake GPU backend, given profile). Its work dir is in /tmp,
    as /var/lib/rota-agent would be on a node: jobs run as their team's uid and must traverse the path to
    their own directory in it (pytest's tmp dirs are the owner's only)."""
    procs = []
    work_dirs: dict[str, Path] = {}  # one per node: an agent started again adopts what it left

    def start(node, profile: str = "h100x8", executor: str = "process", extra: tuple[str, ...] = ()):
        _, raw = NodeToken.issue(node)
        token_file = tmp_path / f"{node.name}.token"
        token_file.write_text(raw)
        token_file.chmod(0o600)  # the agent refuses a token others could read
        log = open(tmp_path / f"agent-{node.name}.log", "w")
        if node.name not in work_dirs:
            work_dirs[node.name] = Path(tempfile.mkdtemp(prefix=f"rota-agent-{node.name}-", dir="/tmp"))
            work_dirs[node.name].chmod(0o711)
        work_dir = work_dirs[node.name]
        proc = subprocess.Popen(
            [sys.executable, "-m", "scheduler.agent", "--portal", live_server.url, "--token-file", str(token_file),
             "--gpu-backend", "fake", "--profile", profile, "--hostname", node.name,
             "--work-dir", str(work_dir), "--interval", "0.5",
             "--executor", executor, *extra],
            cwd=ROOT, env=worker_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        procs.append((proc, log))
        return proc

    yield start
    for proc, log in procs:
        _stop(proc, timeout=15)
        log.close()
    for work_dir in work_dirs.values():
        shutil.rmtree(work_dir, ignore_errors=True)
