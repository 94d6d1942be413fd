"""The adversarial suite: probes run as real jobs in containers and try to break out of their team.

Each test runs a probe inside a container (as a team's uid, the container executor's protections on) and
asserts it fails; then runs the same probe *unprotected* (on the host as the agent, or without the limit
under test) and asserts it succeeds, so a test fails when the protection it checks is removed.
"""

import os
import time
from pathlib import Path

import pytest

from scheduler.agent.executors import Executor, ProcessExecutor
from scheduler.agent.jobs import Assignment, JobEvent
from tests.agent.conftest import drain, wait_until

BUSYBOX = "localhost/rota/busybox:1"
PYTHON = "localhost/rota/python:3.11"
VISION = {"uid": 20001, "gid": 20001, "team": "vision"}
NLP = {"uid": 20002, "gid": 20002, "team": "nlp"}
HOG = 'python3 -c "x = bytearray(300 * 1024 * 1024); print(\'allocated\')"'


def job(job_id: int, command: str, **fields: object) -> Assignment:
    return Assignment.from_wire(
        {"job_id": job_id, "attempt": 1, "command": command, "grace_period_s": 0.5, "image": BUSYBOX,
         "run_as": NLP, **fields}
    )  # fmt: skip


def run(ex: Executor, assignment: Assignment, timeout: float = 30.0) -> tuple[JobEvent, str]:
    """Start the attempt and wait for it alone to end; its end event and its log."""
    started = ex.start(assignment)
    assert started.type == "started", started
    deadline = time.monotonic() + timeout
    while True:
        ended = [event for event in ex.poll() if event.job_id == assignment.job_id]
        if ended:
            return ended[0], Path(ended[0].log_path or "").read_text()
        assert time.monotonic() < deadline, f"job {assignment.job_id} still runs"
        time.sleep(0.05)


@pytest.fixture
def host(tmp_path: Path) -> Executor:
    """The unprotected control: the same probes on the host, as the agent (root), no team identity."""
    ex = ProcessExecutor(tmp_path / "host")
    yield ex
    drain(ex)


def unprotected(assignment: Assignment) -> Assignment:
    return Assignment.from_wire({"job_id": assignment.job_id + 1000, "attempt": 1, "grace_period_s": 0.5,
                                 "command": assignment.command, "env": assignment.env})  # fmt: skip


def test_reading_the_node_token_fails(container_executor, host, tmp_path) -> None:
    token = tmp_path / "agent" / "node.token"
    token.parent.mkdir()
    token.write_text("rn_node_secret")
    token.chmod(0o600)
    state = " ".join(str(slot) for slot in container_executor.state.slots)
    probe = job(1, f"cat {token} {state}; ls /run/podman/podman.sock; echo probed")
    _, log = run(container_executor, probe)
    assert "probed" in log and "rn_node_secret" not in log and '"jobs"' not in log
    _, control = run(host, unprotected(probe))
    assert "rn_node_secret" in control and '"jobs"' in control


def test_finding_another_teams_files_output_or_environment_fails(container_executor, host) -> None:
    ex = container_executor
    victim = job(1, "echo vision-file > notes; echo vision-output; sleep 30", run_as=VISION,
                 env={"VISION_KEY": "vision-env"})  # fmt: skip
    ex.start(victim)
    wait_until(lambda: (ex.work_dir / "jobs" / "1" / "notes").exists(), timeout=15)
    pid = ex.podman.inspect(ex.container_name(1, 1))["Pid"]
    probe = job(
        2,
        f"cat {ex.work_dir}/jobs/1/notes {ex.work_dir}/logs/1-1.log; cat /proc/*/environ /proc/{pid}/environ "
        f"| tr '\\0' '\\n' | grep VISION_KEY; timeout 10 find / -xdev -name notes 2>/dev/null; echo probed",
    )
    _, log = run(ex, probe)  # the container's own / is small; the host's walk is cut short at 10 s
    assert "probed" in log
    assert "vision-file" not in log and "vision-output" not in log and "vision-env" not in log
    _, control = run(host, unprotected(probe))
    assert "vision-file" in control and "vision-output" in control and "vision-env" in control


def test_signalling_another_teams_process_fails(container_executor, host) -> None:
    ex = container_executor
    ex.start(job(1, "sleep 60", run_as=VISION))
    wait_until(lambda: (ex.podman.inspect(ex.container_name(1, 1)) or {}).get("Running"), timeout=15)
    pid = ex.podman.inspect(ex.container_name(1, 1))["Pid"]
    probe = job(2, f"kill -KILL {pid}; echo probed")  # never "kill -1": unprotected, that is the whole host
    _, log = run(ex, probe)
    assert "probed" in log
    time.sleep(0.5)
    assert not ex.poll() and "1:1" in ex.jobs, "the other team's job was disturbed"
    ended, _ = run(host, unprotected(job(2, f"kill -KILL {pid}")))
    assert ended.exit_code == 0
    [victim] = wait_until(lambda: [e for e in ex.poll() if e.job_id == 1], timeout=15)
    assert victim.signal == 9


def test_opening_a_gpu_device_that_is_not_allocated_fails(container_executor) -> None:
    probe = "unset CUDA_VISIBLE_DEVICES; for n in 0 1; do head -c 4 /dev/nvidia$n | wc -c; done; ls /dev"
    gpu0 = {"index": 0, "uuid": "GPU-a"}
    _, log = run(container_executor, job(1, probe, gpus=[gpu0]))
    assert log.splitlines()[0] == "4" and "/dev/nvidia1: No such file" in log
    _, control = run(container_executor, job(2, probe, gpus=[gpu0, {"index": 1, "uuid": "GPU-b"}]))
    assert control.splitlines()[:2] == ["4", "4"]


def test_exceeding_memory_ends_oomkilled_and_disturbs_nothing_else(container_executor) -> None:
    ex = container_executor
    ex.start(job(1, "echo neighbour-started; sleep 60"))
    ended, log = run(ex, job(2, HOG, image=PYTHON, limits={"memory_mb": 64}))
    assert (ended.type, ended.reason, ended.signal) == ("exited", "OOMKilled", 9)
    assert ended.message == "memory limit 64 MiB exceeded" and "allocated" not in log
    assert ex.jobs["1:1"].state == "running"
    assert (ex.podman.inspect(ex.container_name(1, 1)) or {}).get("Running")
    control, log = run(ex, job(3, HOG, image=PYTHON, limits={"memory_mb": 1024}))
    assert (control.exit_code, control.reason, log) == (0, "", "allocated\n")
    ex.stop("1:1")
    [neighbour] = wait_until(lambda: [e for e in ex.poll() if e.job_id == 1], timeout=15)
    assert (neighbour.signal, neighbour.reason) == (15, "")
    assert Path(neighbour.log_path).read_text().startswith("neighbour-started\n")


# Forks up to 120 sleeping children and prints how many it got (a fork the pids cgroup refuses: EAGAIN).
COUNT_FORKS = (
    "python3 -c 'import os, time\nn = 0\nfor _ in range(120):\n    try:\n        pid = os.fork()\n"
    "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(20)\n        os._exit(0)\n"
    "    n += 1\nprint(n)'"
)


def test_a_fork_bomb_is_stopped_by_the_process_limit(container_executor) -> None:
    ex = container_executor
    _, log = run(ex, job(1, COUNT_FORKS, image=PYTHON, limits={"pids": 32}))
    assert int(log.split()[-1]) < 32
    _, control = run(ex, job(2, COUNT_FORKS, image=PYTHON))
    assert int(control.split()[-1]) == 120
    before = len(os.listdir("/proc"))
    # the bomb only runs once the limit has held above
    bomb = job(3, "bomb() { bomb | bomb & }; bomb; sleep 30", limits={"pids": 64}, time_limit_s=8)
    ex.start(bomb)
    time.sleep(2)
    assert len(os.listdir("/proc")) - before < 200, "the bomb grew past its limit"
    ended, _ = run(ex, job(4, "echo the node still starts jobs"))
    assert ended.exit_code == 0
    [stopped] = wait_until(lambda: [e for e in ex.poll() if e.job_id == 3], timeout=20)
    assert stopped.type == "stopped" and stopped.message.startswith("timed-out")
