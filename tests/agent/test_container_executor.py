"""The container executor on real Podman: output, identity, environment, stops, limits, images, adoption."""

import time
from pathlib import Path

import pytest

from scheduler.agent.executors import (
    ContainerExecutor,
    ExecutorUnavailable,
    ProcessExecutor,
    cgroups,
    open_executor,
)
from scheduler.agent.jobs import Assignment, JobEvent
from tests.agent.conftest import wait_until

PYTHON = "localhost/rota/python:3.11"
BUSYBOX = "localhost/rota/busybox:1"
VISION = {"uid": 20001, "gid": 20001, "team": "vision"}


def assignment(job_id: int, command: str, **fields: object) -> Assignment:
    return Assignment.from_wire(
        {"job_id": job_id, "attempt": 1, "command": command, "grace_period_s": 1, "image": BUSYBOX,
         "run_as": VISION, **fields}
    )  # fmt: skip


def run_until_ended(ex: ContainerExecutor, timeout: float = 20.0) -> list[JobEvent]:
    events: list[JobEvent] = []
    deadline = time.monotonic() + timeout
    while ex.jobs:
        assert time.monotonic() < deadline, f"jobs still running: {list(ex.jobs)}"
        events.extend(ex.poll())
        time.sleep(0.05)
    return events


def test_it_runs_the_command_in_its_image_as_the_team_in_its_own_directory(container_executor) -> None:
    ex = container_executor
    started = ex.start(
        assignment(7, 'id -u; id -g; pwd; echo "$TEAM|$ROTA_JOB_ID|$CUDA_VISIBLE_DEVICES"; '
                      'python3 -c "print(6*7)"', image=PYTHON, env={"TEAM": "vision"},
                   gpus=[{"index": 1, "uuid": "GPU-b"}])
    )  # fmt: skip
    assert started.type == "started"
    [ended] = run_until_ended(ex)
    assert (ended.type, ended.exit_code, ended.signal, ended.reason) == ("exited", 0, None, "")
    assert Path(ended.log_path).read_text().split() == ["20001", "20001", "/job", "vision|7|1", "42"]


def test_an_exit_code_comes_back_and_the_container_is_removed(container_executor) -> None:
    ex = container_executor
    ex.start(assignment(1, "echo bye; exit 3"))
    [ended] = run_until_ended(ex)
    assert (ended.type, ended.exit_code) == ("exited", 3)
    assert ex.podman.inspect(ex.container_name(1, 1)) is None


def test_a_stop_reaches_every_process_of_the_container(container_executor) -> None:
    ex = container_executor
    ex.start(assignment(1, "trap 'echo got TERM; exit 0' TERM; echo ready; sleep 30 & wait"))
    wait_until(lambda: "ready" in (ex.work_dir / "logs" / "1-1.log").read_text(), timeout=15)
    ex.stop("1:1")
    [ended] = run_until_ended(ex)
    assert (ended.type, ended.exit_code, ended.message) == ("exited", 0, "stopped on request")
    assert "got TERM" in Path(ended.log_path).read_text()


def test_a_job_ignoring_sigterm_is_killed_after_its_grace_period(container_executor) -> None:
    ex = container_executor
    ex.start(assignment(1, "trap '' TERM; echo ready; sleep 30", grace_period_s=0.5))
    wait_until(lambda: "ready" in (ex.work_dir / "logs" / "1-1.log").read_text(), timeout=15)
    ex.stop("1:1")
    [ended] = run_until_ended(ex)
    assert (ended.type, ended.signal, ended.reason) == ("exited", 9, "")


def test_a_job_past_its_time_limit_is_stopped_as_timed_out(container_executor) -> None:
    ex = container_executor
    ex.start(assignment(1, "sleep 30", time_limit_s=1))
    [ended] = run_until_ended(ex)
    assert ended.type == "stopped" and ended.message.startswith("timed-out")


def test_a_missing_image_fails_to_start_with_image_pull_failed(container_executor) -> None:
    event = container_executor.start(assignment(1, "true", image="localhost/rota/missing:1"))
    assert (event.type, event.reason) == ("start_failed", "ImagePullFailed")
    assert "localhost/rota/missing:1" in event.message and "connection refused" in event.message


def test_a_job_without_an_image_runs_in_the_nodes_default_image_never_on_the_host(container_executor) -> None:
    started = container_executor.start(assignment(1, "python3 -c 'print(1)'; ls /job/..", image=None))
    assert started.message == "no image given: ran in the node's default image localhost/rota/python:3.11"
    [ended] = run_until_ended(container_executor)
    output = Path(ended.log_path).read_text()
    assert output.split()[0] == "1" and "agent-jobs." not in output  # not the host's work dir
    strict = ContainerExecutor(container_executor.work_dir, default_image=None)
    refused = strict.start(assignment(2, "true", image=None))
    assert refused.type == "start_failed" and "no image" in refused.message


def test_a_restarted_agent_adopts_a_running_container_and_learns_how_it_ended(container_executor) -> None:
    ex = container_executor
    ex.start(assignment(1, "sleep 2; exit 4"))
    successor = ContainerExecutor(ex.work_dir, fake_gpus=True)
    assert successor.adopt() == [] and list(successor.jobs) == ["1:1"]
    ex._shims.clear()  # the old agent is gone; its shim stays the successor's to watch
    ex.jobs.clear()
    [ended] = run_until_ended(successor)
    assert (ended.type, ended.exit_code) == ("exited", 4)


def test_it_describes_itself_for_the_register_body(container_executor) -> None:
    described = container_executor.describe()
    assert described["name"] == "container" and described["isolates"] is True
    assert described["runtime"].startswith("podman 4.")


def test_auto_picks_containers_where_podman_runs_and_warns_loudly_where_it_does_not(
    tmp_path, images, monkeypatch, caplog
) -> None:
    assert isinstance(open_executor("auto", tmp_path / "a", fake_gpus=True), ContainerExecutor)
    monkeypatch.setenv("PATH", str(tmp_path))  # no podman on it
    fallback = open_executor("auto", tmp_path / "b")
    assert isinstance(fallback, ProcessExecutor) and "does NOT isolate tenants" in caplog.text
    with pytest.raises(ExecutorUnavailable, match="podman is not installed"):
        open_executor("container", tmp_path / "c")


def test_an_attempt_that_cannot_be_launched_leaves_nothing_behind(container_executor) -> None:
    ex = container_executor
    refused = ex.start(assignment(1, "true", env={"BAD": "two\nlines"}))
    assert refused.type == "start_failed" and "env BAD: a value with a line break" in refused.message
    (ex.work_dir / "devices").write_text("not a directory")  # the GPU device files cannot be made
    event = ex.start(assignment(2, "true", gpus=[{"index": 0, "uuid": "GPU-a"}], limits={"memory_mb": 64}))
    assert event.type == "start_failed" and event.message.startswith("cannot start:")
    assert not list((ex.work_dir / "run").glob("*.env"))
    assert ex.podman.inspect(ex.container_name(2, 1)) is None
    assert not cgroups.job_cgroup_dir(ex.container_name(2, 1)).exists()  # made before the devices failed
