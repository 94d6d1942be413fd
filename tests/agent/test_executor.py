"""The executor on real processes: exit codes, logs, environment, stops, time limits, adoption."""

import os
import socket
import time
from pathlib import Path

import pytest

from scheduler.agent import procs
from scheduler.agent.executors import Executor, ProcessExecutor
from scheduler.agent.executors.base import FINISHED_KEPT
from scheduler.agent.jobs import Assignment, JobEvent
from tests.agent.conftest import wait_until


def assignment(job_id: int, command: str, **fields: object) -> Assignment:
    return Assignment.from_wire(
        {"job_id": job_id, "attempt": 1, "command": command, "grace_period_s": 1, **fields}
    )


def run_until_ended(ex: Executor, timeout: float = 5.0) -> list[JobEvent]:
    """Poll until no job is left; the end events in order."""
    events: list[JobEvent] = []
    deadline = time.monotonic() + timeout
    while ex.jobs:
        assert time.monotonic() < deadline, f"jobs still running: {list(ex.jobs)}"
        events.extend(ex.poll())
        time.sleep(0.02)
    return events


def test_a_job_that_succeeds_reports_exit_code_zero_and_its_output(executor: Executor) -> None:
    started = executor.start(assignment(1, "echo out; echo err >&2"))
    assert started.type == "started" and started.pid > 0
    [ended] = run_until_ended(executor)
    assert (ended.type, ended.exit_code, ended.signal, ended.pid) == ("exited", 0, None, started.pid)
    assert Path(ended.log_path).read_text() == "out\nerr\n"


def test_a_failing_job_reports_its_exit_code(executor: Executor) -> None:
    executor.start(assignment(1, "exit 3"))
    [ended] = run_until_ended(executor)
    assert (ended.type, ended.exit_code, ended.signal) == ("exited", 3, None)


def test_it_runs_the_job_with_its_gpus_environment_and_own_directory(executor: Executor, monkeypatch) -> None:
    monkeypatch.setenv("ROTA_NODE_TOKEN", "secret")
    ex = ProcessExecutor(executor.work_dir)  # reads the agent's environment now
    gpus = [{"index": 2, "uuid": "GPU-b"}, {"index": 5, "uuid": "GPU-e"}]
    ex.start(
        assignment(
            7,
            'echo "$CUDA_VISIBLE_DEVICES|$ROTA_JOB_ID|$ROTA_ATTEMPT|$TEAM|$ROTA_NODE_TOKEN|$PWD"',
            gpus=gpus,
            env={"TEAM": "vision", "ROTA_JOB_ID": "spoofed"},
        )
    )
    [ended] = run_until_ended(ex)
    visible, job_id, attempt, team, token, cwd = Path(ended.log_path).read_text().strip().split("|")
    assert (visible, job_id, attempt, team, token) == ("2,5", "7", "1", "vision", "")
    assert Path(cwd) == ex.work_dir / "jobs" / "7"


def test_mig_slices_are_made_visible_by_uuid(executor: Executor) -> None:
    executor.start(assignment(1, "echo $CUDA_VISIBLE_DEVICES", gpus=[{"index": 110, "uuid": "MIG-aa"}]))
    [ended] = run_until_ended(executor)
    assert Path(ended.log_path).read_text() == "MIG-aa\n"


def test_a_stop_sends_sigterm_to_the_group_and_reports_the_signal(executor: Executor) -> None:
    executor.start(assignment(1, "sleep 30 & sleep 30"))
    time.sleep(0.2)
    executor.stop("1:1")
    assert executor.running()[0]["state"] == "stopping"
    [ended] = run_until_ended(executor)
    assert (ended.type, ended.signal, ended.message) == ("exited", 15, "stopped on request")


def test_it_kills_the_whole_group_after_the_grace_period(executor: Executor) -> None:
    executor.start(assignment(1, "trap '' TERM; sleep 30 & sleep 30", grace_period_s=0.5))
    pgid = executor.jobs["1:1"].pid
    wait_until(lambda: len(procs.group_members(pgid)) >= 3)
    began = time.monotonic()
    executor.stop("1:1")
    [ended] = run_until_ended(executor)
    assert time.monotonic() - began >= 0.5
    assert (ended.type, ended.signal) == ("exited", 9)
    assert procs.group_members(pgid) == []


def test_a_job_past_its_time_limit_is_stopped_and_reported_as_timed_out(executor: Executor) -> None:
    executor.start(assignment(1, "sleep 30", time_limit_s=0.3))
    began = time.monotonic()
    [ended] = run_until_ended(executor)
    assert time.monotonic() - began >= 0.3
    assert ended.type == "stopped" and ended.signal == 15
    assert ended.message.startswith("timed-out") and "time limit of 0.3 s" in ended.message


def test_its_gpus_stay_busy_until_every_process_of_the_group_is_gone(executor: Executor) -> None:
    # The command ends at once, leaving behind a process that ignores SIGTERM.
    command = "(trap '' TERM; touch ready; exec sleep 30) & while [ ! -e ready ]; do sleep 0.01; done; exit 0"
    executor.start(assignment(1, command, gpus=[{"index": 0, "uuid": "GPU-a"}], grace_period_s=0.5))
    wait_until(lambda: executor.poll() == [] and executor.jobs["1:1"].state == "stopping")
    assert executor.busy_gpus() == {"GPU-a": executor.jobs["1:1"].pid}
    assert executor.running()[0]["state"] == "stopping"
    [ended] = run_until_ended(executor)
    assert (ended.type, ended.exit_code) == ("exited", 0)  # the command's own status
    assert executor.busy_gpus() == {}


def test_an_empty_command_fails_to_start(executor: Executor) -> None:
    event = executor.start(assignment(1, "  "))
    assert (event.type, event.message) == ("start_failed", "empty command")
    assert executor.jobs == {} and executor.has_run(1, 1)
    assert ProcessExecutor(executor.work_dir).adopt() == [event]  # kept until the portal acknowledges it


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"A=B": "1"}, "invalid environment variable name 'A=B'"),
        ({"": "1"}, "invalid environment variable name ''"),
        ({"A\0B": "1"}, "invalid environment variable name 'A\\x00B'"),
        ({"A": "nul\0byte"}, "cannot start: embedded null byte"),
    ],
)
def test_an_environment_the_os_refuses_fails_that_start_only(
    executor: Executor, env: dict[str, str], message: str
) -> None:
    event = executor.start(assignment(1, "true", env=env))
    assert (event.type, event.message) == ("start_failed", message)
    assert executor.jobs == {} and executor.has_run(1, 1)
    assert executor.start(assignment(2, "true")).type == "started"


def test_it_never_starts_the_same_attempt_twice(executor: Executor) -> None:
    executor.start(assignment(1, "true"))
    run_until_ended(executor)
    assert executor.has_run(1, 1) and not executor.has_run(1, 2)


def test_a_restarted_executor_adopts_a_job_that_still_runs(executor: Executor) -> None:
    started = executor.start(assignment(1, "sleep 30"))
    successor = ProcessExecutor(executor.work_dir)
    assert successor.adopt() == []
    assert successor.running() == [{"job_id": 1, "attempt": 1, "pid": started.pid, "state": "running"}]
    successor.stop("1:1")
    [ended] = run_until_ended(successor)
    assert (ended.type, ended.signal) == ("exited", 15)
    executor.jobs.clear()


def test_a_job_that_ended_while_no_agent_watched_reports_its_real_exit_code(executor: Executor) -> None:
    started = executor.start(assignment(1, "sleep 0.2; exit 4"))
    wait_until(lambda: not procs.group_members(started.pid))
    [ended] = ProcessExecutor(executor.work_dir).adopt()
    assert (ended.type, ended.exit_code) == ("exited", 4)
    executor.jobs.clear()


def test_a_record_from_before_a_reboot_is_not_adopted(executor: Executor) -> None:
    executor.start(assignment(1, "sleep 30"))
    executor.jobs["1:1"].boot_id = "another-boot"
    executor.save()
    successor = ProcessExecutor(executor.work_dir)
    [ended] = successor.adopt()
    assert successor.jobs == {} and ended.type == "exited"
    executor.jobs["1:1"].boot_id = procs.boot_id()


def test_an_unacknowledged_end_event_is_resent_after_a_restart(executor: Executor) -> None:
    executor.start(assignment(1, "exit 5"))
    [ended] = run_until_ended(executor)
    [again] = ProcessExecutor(executor.work_dir).adopt()
    assert again == ended
    executor.acknowledge(ended)
    assert ProcessExecutor(executor.work_dir).adopt() == []


def test_every_attempt_that_ends_is_in_the_state_file_at_once_and_never_started_again_after_a_restart(
        executor: Executor) -> None:
    """The ended attempts' JSON is kept from one save to the next (most of the file): each end writes it anew,
    however many saves came between, and a restarted agent refuses every one of them."""
    for job_id in (1, 2):
        executor.start(assignment(job_id, "true"))
        run_until_ended(executor)
        executor.save()  # a save with nothing ended in between
        assert f"{job_id}:1" in executor.read_state()["finished"]
    executor.never_started(assignment(3, "true"))
    executor.start_failed(assignment(4, "true"), "no such image")
    successor = ProcessExecutor(executor.work_dir)
    successor.adopt()
    assert all(successor.has_run(job_id, 1) for job_id in (1, 2, 3, 4)) and not successor.has_run(5, 1)


def test_the_state_file_keeps_the_latest_ended_attempts_up_to_its_bound(executor: Executor) -> None:
    kept = FINISHED_KEPT * 11 // 10
    for job_id in range(1, kept + 2):  # one past the bound: the oldest are dropped, FINISHED_KEPT stay
        executor.never_started(assignment(job_id, "true"))
    finished = executor.read_state()["finished"]
    assert len(finished) == FINISHED_KEPT and f"{kept + 1}:1" in finished and "1:1" not in finished


def test_the_shim_is_a_fork_of_the_agent_that_keeps_none_of_its_descriptors(executor: Executor) -> None:
    """No interpreter starts per job (it was a drain's largest CPU cost), and the agent's sockets (to the
    portal, to Redis) do not live on in a shim that runs for days."""
    portal = socket.create_server(("127.0.0.1", 0))
    try:
        started = executor.start(assignment(1, "touch started; exec sleep 30"))
        wait_until(lambda: (executor.work_dir / "jobs" / "1" / "started").exists())
        assert Path(f"/proc/{started.pid}/cmdline").read_bytes() == Path("/proc/self/cmdline").read_bytes()
        assert sorted(int(fd) for fd in os.listdir(f"/proc/{started.pid}/fd")) == [0, 1, 2]
    finally:
        portal.close()


def test_the_state_file_is_written_when_a_job_starts(executor: Executor) -> None:
    executor.start(assignment(1, "sleep 30"))
    assert [job["job_id"] for job in executor.read_state()["jobs"]] == [1]
    assert os.path.exists(executor.jobs["1:1"].log_path)


def test_the_attempts_that_end_in_one_pass_are_saved_together_before_they_are_returned(
        executor: Executor, monkeypatch) -> None:
    """One write of the state file for a pass, however many ended in it (a busy node's GPUs turn over
    together), and every one of them is in the file when the pass returns its events, before any is sent."""
    for job_id in (1, 2, 3):
        executor.start(assignment(job_id, "true"))
    wait_until(lambda: all(procs.child_exited(job.pid) for job in executor.jobs.values()))
    saves, save = [], executor.save

    def counted() -> None:
        saves.append(1)
        save()

    monkeypatch.setattr(executor, "save", counted)
    ended = executor.poll()
    assert sorted(event.job_id for event in ended) == [1, 2, 3] and len(saves) == 1
    state = executor.read_state()
    assert not state["jobs"] and {"1:1", "2:1", "3:1"} <= state["finished"].keys()
    assert sorted(event["job_id"] for event in state["unreported"]) == [1, 2, 3]
