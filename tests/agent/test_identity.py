"""Identity without containers: the process executor runs each job as its team, in private places."""

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scheduler.agent.executors import ProcessExecutor
from scheduler.agent.jobs import Assignment, JobEvent
from tests.agent.conftest import ROOT

SYSTEM_PYTHON = "/usr/bin/python3"  # the test interpreter may live where an unprivileged user cannot read
VISION = {"uid": 20001, "gid": 20001, "team": "vision"}


def assignment(job_id: int, command: str, **fields: object) -> Assignment:
    return Assignment.from_wire(
        {"job_id": job_id, "attempt": 1, "command": command, "grace_period_s": 1, "run_as": VISION, **fields}
    )


def run_until_ended(ex: ProcessExecutor, timeout: float = 10.0) -> list[JobEvent]:
    events: list[JobEvent] = []
    deadline = time.monotonic() + timeout
    while ex.jobs:
        assert time.monotonic() < deadline
        events.extend(ex.poll())
        time.sleep(0.02)
    return events


def test_a_root_agent_runs_the_job_as_its_team_with_a_private_directory_and_log(executor) -> None:
    assert os.geteuid() == 0, "the identity tests need a root agent, as on a real node"
    executor.start(assignment(3, 'id -u; id -g; id -G; echo "$HOME"; echo secret > mine'))
    [ended] = run_until_ended(executor)
    home = str(executor.work_dir / "jobs" / "3")
    assert Path(ended.log_path).read_text().split() == ["20001", "20001", "20001", home]
    job_dir, log = executor.work_dir / "jobs" / "3", Path(ended.log_path)
    for path, mode in ((job_dir, 0o700), (log, 0o600), (job_dir / "mine", None)):
        info = path.stat()
        assert (info.st_uid, info.st_gid) == (20001, 20001)
        if mode is not None:
            assert stat.S_IMODE(info.st_mode) == mode
    slots = [slot for slot in executor.state.slots if slot.exists()]
    assert slots and all(stat.S_IMODE(slot.stat().st_mode) == 0o600 for slot in slots)
    assert stat.S_IMODE((executor.work_dir / "run").stat().st_mode) == 0o700


def test_the_shim_stays_the_agents_so_the_job_cannot_forge_its_status(executor) -> None:
    executor.start(assignment(1, 'echo \'{"exit_code": 0}\' > "$STATUS"; exit 5',
                              env={"STATUS": str(executor.work_dir / "run" / "1-1.status")}))  # fmt: skip
    [ended] = run_until_ended(executor)
    assert ended.exit_code == 5 and "Permission denied" in Path(ended.log_path).read_text()


def test_a_job_cannot_read_another_teams_directory_or_signal_its_processes(executor) -> None:
    executor.start(assignment(1, "echo vision-secret > notes; sleep 30"))
    time.sleep(0.3)
    victim = executor.jobs["1:1"]
    probe = (f"cat {executor.work_dir}/jobs/1/notes; ls {executor.work_dir}/logs; "
             f"kill -TERM -{victim.pid} && echo SIGNALLED")  # fmt: skip
    nlp = {"uid": 20002, "gid": 20002, "team": "nlp"}
    executor.start(assignment(2, probe, run_as=nlp))
    time.sleep(1)
    executor.poll()
    log = (executor.work_dir / "logs" / "2-1.log").read_text()
    assert "vision-secret" not in log and "SIGNALLED" not in log and log.count("denied") >= 2
    assert "1:1" in executor.jobs and executor.jobs["1:1"].state == "running"
    # control: the same probe without a team identity (as the agent, root) reads and signals
    executor.start(Assignment.from_wire({"job_id": 3, "attempt": 1, "command": probe, "grace_period_s": 1}))
    ended = run_until_ended(executor)
    control = (executor.work_dir / "logs" / "3-1.log").read_text()
    assert "vision-secret" in control and "SIGNALLED" in control
    assert {event.job_id: event.signal for event in ended}[1] == 15


NOT_ROOT = """
import os, sys
os.setgid(20050); os.setgroups([]); os.setuid(20050)
from scheduler.agent.executors import ProcessExecutor
from scheduler.agent.jobs import Assignment
ex = ProcessExecutor(sys.argv[1], allow_run_as_self=sys.argv[2] == "dev")
event = ex.start(Assignment.from_wire({"job_id": 1, "attempt": 1, "command": "true",
                                       "run_as": {"uid": 20001, "gid": 20001, "team": "vision"}}))
import time
while ex.jobs:  # the detached shim writes its status under run/: let it finish before the test removes it
    ex.poll(); time.sleep(0.02)
print(event.type + "|" + event.message)
"""


def test_an_agent_that_is_not_root_refuses_a_team_job_unless_told_to_run_it_as_itself() -> None:
    base = Path(tempfile.mkdtemp(prefix="rota-not-root-"))  # pytest's tmp_path is root's alone
    base.chmod(0o755)
    work = base / "work"
    work.mkdir()
    os.chown(work, 20050, 20050)

    def run(mode: str) -> str:
        result = subprocess.run([SYSTEM_PYTHON, "-c", NOT_ROOT, str(work), mode], cwd=ROOT,
                                capture_output=True, text=True, timeout=30)  # fmt: skip
        return result.stdout.strip() or result.stderr

    refused = run("strict")
    expected = "start_failed|cannot run as team vision's uid 20001: the node agent is not root"
    assert refused.startswith(expected)
    assert "--dev-run-as-self" in refused
    started = run("dev")
    shutil.rmtree(base)
    assert started.startswith("started|ran as the node agent's own user (uid 20050)")


def test_the_process_executor_says_it_ignores_the_image_and_the_limits(executor) -> None:
    event = executor.start(assignment(1, "true", image="localhost/rota/busybox:1", limits={"memory_mb": 64}))
    assert "image localhost/rota/busybox:1 not used" in event.message
    assert "limits (memory 64 MiB) not enforced" in event.message
    assert executor.describe()["isolates"] is False


def test_the_agent_refuses_a_token_file_others_can_read(tmp_path) -> None:
    token = tmp_path / "token"
    token.write_text("rn_secret")
    token.chmod(0o644)
    result = subprocess.run(
        [sys.executable, "-m", "scheduler.agent", "--portal", "http://127.0.0.1:9",
         "--token-file", str(token)],
        cwd=ROOT, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert result.returncode == 2 and "readable by others (mode 0644)" in result.stderr
