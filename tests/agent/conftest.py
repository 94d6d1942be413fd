"""Fixtures for the node agent's tests: no Django, no database; real processes and a stand-in portal."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from scheduler.agent.client import PortalClient
from scheduler.agent.executors import ContainerExecutor, Executor, ProcessExecutor
from scheduler.agent.gpu.fake import FakeBackend
from scheduler.agent.gpu.profile import parse_profile
from scheduler.agent.loop import Agent, AgentConfig
from tests.agent.standin_portal import TOKEN, StandInPortal

ROOT = Path(__file__).resolve().parents[2]
SMALL_NODE = {
    "node": "test-node",
    "cpus": 8,
    "memory_mb": 64000,
    "gpus": [{"model": "a100-40gb", "count": 2}],
}


def wait_until(predicate: Callable[[], object], timeout: float = 10.0, interval: float = 0.02) -> object:
    """Poll ``predicate`` until it is truthy; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout} s")


@pytest.fixture
def portal() -> Iterator[StandInPortal]:
    """A stand-in portal on a random local port."""
    server = StandInPortal(interval_s=0.1).start()
    yield server
    server.stop()


@pytest.fixture
def executor(tmp_path: Path) -> Iterator[Executor]:
    """An executor in a temporary work dir; whatever it still runs is killed at the end."""
    ex = ProcessExecutor(tmp_path / "work")
    yield ex
    for job in list(ex.jobs.values()):
        ex.stop(job.key, grace_s=0)
    deadline = time.monotonic() + 5
    while ex.jobs and time.monotonic() < deadline:
        ex.poll()
        time.sleep(0.02)


def drain(ex: Executor, timeout: float = 10.0) -> None:
    """Stop whatever ``ex`` still runs, at once, and wait until it is gone."""
    for job in list(ex.jobs.values()):
        ex.stop(job.key, grace_s=0)
    deadline = time.monotonic() + timeout
    while ex.jobs and time.monotonic() < deadline:
        ex.poll()
        time.sleep(0.05)


@pytest.fixture(scope="session")
def images() -> None:
    """The local images (``scripts/build-images.sh``: skipped when present). Podman must be installed
    (``scripts/system-packages.sh``); the container tests fail, not skip, without it."""
    subprocess.run([str(ROOT / "scripts" / "build-images.sh")], check=True, cwd=ROOT, timeout=600)


@pytest.fixture
def container_executor(tmp_path: Path, images: None) -> Iterator[ContainerExecutor]:
    """A container executor with fake GPU device files; its containers are removed at the end."""
    ex = ContainerExecutor(tmp_path / "work", fake_gpus=True)
    yield ex
    drain(ex)


@pytest.fixture
def make_agent(tmp_path: Path, portal: StandInPortal) -> Iterator[Callable[..., Agent]]:
    """Build agents wired to the stand-in portal and a fake two-GPU node."""
    agents: list[Agent] = []

    def build(profile: dict | None = None, token_file: Path | None = None, **config: object) -> Agent:
        backend = FakeBackend(parse_profile(profile or SMALL_NODE))
        settings = {"work_dir": tmp_path / "work", "interval_s": 0.1, **config}
        client = PortalClient(portal.url, TOKEN, token_file=token_file)
        agent = Agent(AgentConfig(**settings), backend=backend, client=client)
        agents.append(agent)
        return agent

    yield build
    for agent in agents:
        agent.executor.stop_all("shutdown", "test over")
        for job in list(agent.executor.jobs.values()):
            job.grace_period_s = 0
        deadline = time.monotonic() + 5
        while agent.executor.jobs and time.monotonic() < deadline:
            agent.executor.poll()
            time.sleep(0.02)


@contextmanager
def running(agent: Agent) -> Iterator[threading.Event]:
    """Run the agent's loop in a thread; on exit it shuts down (stopping its jobs) and joins."""
    stop = threading.Event()
    thread = threading.Thread(target=agent.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield stop
    finally:
        stop.set()
        thread.join(timeout=15)
