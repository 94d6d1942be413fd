"""The agent as a real process: SIGKILL and restart adopts or kills its orphans, SIGTERM stops its jobs,
the command line, the NVML check script, and the import rule (no Django in the agent)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from scheduler.agent import procs
from scheduler.agent.executors import ContainerExecutor
from scheduler.agent.executors.base import STATE_FILE
from scheduler.agent.executors.statefile import StateFile
from tests.agent.conftest import SMALL_NODE, wait_until
from tests.agent.standin_portal import TOKEN, StandInPortal

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def start_agent(tmp_path: Path, portal: StandInPortal) -> Iterator:
    """Start ``python -m scheduler.agent`` against the stand-in portal; kill leftovers at the end."""
    (tmp_path / "token").write_text(TOKEN + "\n")
    (tmp_path / "token").chmod(0o600)
    (tmp_path / "node.json").write_text(json.dumps(SMALL_NODE))
    started: list[subprocess.Popen] = []

    def start(*extra: str) -> subprocess.Popen:
        command = [
            sys.executable, "-m", "scheduler.agent", "--portal", portal.url,
            "--token-file", str(tmp_path / "token"), "--gpu-backend", "fake",
            "--profile", str(tmp_path / "node.json"), "--work-dir", str(tmp_path / "work"),
            "--interval", "0.1", "--executor", "process", *extra,
        ]  # fmt: skip
        log = open(tmp_path / f"agent-{len(started)}.log", "w")  # noqa: SIM115 (kept for the process's life)
        process = subprocess.Popen(command, cwd=ROOT, stderr=log, stdout=log)
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=10)
    state = StateFile(tmp_path / "work", STATE_FILE).read() or {"jobs": []}  # a failed test's jobs: kill
    for job in state["jobs"]:
        if procs.leader_alive(job["pid"], job["start_ticks"]):
            procs.signal_group(job["pid"], signal.SIGKILL)


def started_pid(portal: StandInPortal, job_id: int) -> int:
    [event] = wait_until(lambda: portal.events_of(job_id, "started"), timeout=15)  # a fresh interpreter
    return event["pid"]


def test_an_agent_restarted_after_sigkill_adopts_its_jobs_and_kills_unassigned_ones(
    portal: StandInPortal, start_agent
) -> None:
    portal.assign(1, "sleep 30")  # still assigned after the restart: adopted
    portal.assign(2, "sleep 30")  # unassigned while the agent is dead: killed after the restart
    portal.assign(3, "sleep 1; exit 4")  # ends while no agent watches: its exit code is still reported
    first = start_agent()
    pids = {job_id: started_pid(portal, job_id) for job_id in (1, 2, 3)}
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=5)
    assert all(procs.group_members(pid) for pid in (pids[1], pids[2]))
    portal.unassign(2)
    wait_until(lambda: not procs.group_members(pids[3]), timeout=5)

    second = start_agent()
    [ended] = wait_until(lambda: portal.events_of(3, "exited"), timeout=10)
    assert ended["exit_code"] == 4
    [killed] = wait_until(lambda: portal.events_of(2, "exited"))
    assert killed["signal"] == 15 and not procs.group_members(pids[2])
    wait_until(lambda: [r["job_id"] for r in portal.heartbeats[-1]["running"]] == [1])
    assert portal.heartbeats[-1]["running"][0]["pid"] == pids[1]
    assert [len(portal.events_of(job_id, "started")) for job_id in (1, 2, 3)] == [1, 1, 1]
    assert procs.group_members(pids[1])

    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=10) == 0


def test_sigterm_stops_the_jobs_gracefully_before_the_agent_exits(portal: StandInPortal, start_agent) -> None:
    portal.assign(1, "trap 'echo bye; exit 0' TERM; echo ready; while true; do sleep 0.05; done")
    agent = start_agent()
    pid = started_pid(portal, 1)
    wait_until(lambda: portal.log_text(1) == "ready\n")
    agent.send_signal(signal.SIGTERM)
    assert agent.wait(timeout=10) == 0
    [stopped] = portal.events_of(1, "stopped")
    assert stopped["exit_code"] == 0 and "shutting down" in stopped["message"]
    assert portal.log_text(1).endswith("bye\n") and not procs.group_members(pid)


def test_once_registers_sends_one_heartbeat_and_exits(portal: StandInPortal, start_agent) -> None:
    assert start_agent("--once").wait(timeout=10) == 0
    assert len(portal.registrations) == 1 and len(portal.heartbeats) == 1


def test_once_exits_non_zero_when_the_portal_cannot_be_reached(portal: StandInPortal, start_agent) -> None:
    portal.down = True
    assert start_agent("--once").wait(timeout=10) == 1


def test_it_refuses_to_start_without_a_token(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "scheduler.agent", "--portal", "http://127.0.0.1:9"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        timeout=30,
    )
    assert result.returncode == 2 and "node token is required" in result.stderr


def test_the_nvml_check_script_exits_cleanly_where_there_is_no_gpu() -> None:
    result = subprocess.run(
        [sys.executable, "scripts/check_nvml.py", "--samples", "1"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "NVML is not available" in result.stdout or "NVML backend OK" in result.stdout


def test_the_agent_imports_no_django() -> None:
    code = (
        "import sys, scheduler.agent.__main__, scheduler.agent.loop, scheduler.agent.gpu;"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('django', 'rest_framework', 'celery')];"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=30)


def test_a_container_node_runs_jobs_in_images_as_their_team_and_adopts_them_after_sigkill(
    portal: StandInPortal, start_agent, images, tmp_path: Path
) -> None:
    vision = {"uid": 20001, "gid": 20001, "team": "vision"}
    portal.assign(1, "echo hello from $(id -u)", image="localhost/rota/busybox:1", run_as=vision)
    portal.assign(2, "python3 -c 'x = bytearray(300 * 2**20)'", image="localhost/rota/python:3.11",
                  run_as=vision, limits={"cpus": 1, "memory_mb": 64, "pids": 64})  # fmt: skip
    portal.assign(3, "sleep 60", image="localhost/rota/busybox:1", run_as=vision)
    first = start_agent("--executor", "container")
    try:
        wait_until(lambda: portal.events_of(1, "exited") and portal.events_of(2, "exited"), timeout=30)
        assert portal.events_of(1, "exited")[0]["exit_code"] == 0
        assert portal.log_text(1) == "hello from 20001\n"
        [oom] = portal.events_of(2, "exited")
        assert (oom["reason"], oom["signal"]) == ("OOMKilled", 9)
        assert oom["message"] == "memory limit 64 MiB exceeded"
        executor = portal.registrations[0]["executor"]
        assert executor["name"] == "container" and executor["runtime"].startswith("podman ")
        pid = started_pid(portal, 3)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=5)
        second = start_agent("--executor", "container")
        wait_until(lambda: len(portal.registrations) == 2, timeout=15)
        time.sleep(1)
        assert not portal.events_of(3, "exited") and procs.group_members(pid)  # adopted, still running
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=20) == 0
        [stopped] = portal.events_of(3, "stopped")
        assert stopped["signal"] == 15 and "shutting down" in stopped["message"]
    finally:  # whatever a failure left: the containers of this work dir
        leftover = ContainerExecutor(tmp_path / "work")
        for job_id in (1, 2, 3):
            leftover.podman.remove(leftover.container_name(job_id, 1))
    assert leftover.podman.inspect(leftover.container_name(3, 1)) is None
