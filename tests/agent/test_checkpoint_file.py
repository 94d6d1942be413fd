"""A job's checkpoint file, watched by a real agent process and reported as ``checkpoint`` events: with the
process executor and inside a container (the file is the job directory's, mounted at /job)."""

from __future__ import annotations

import datetime as dt
import os
import signal
import time
from pathlib import Path

from scheduler.agent.checkpoints import changed_at, checkpoint_events, modified_at
from scheduler.agent.executors import ContainerExecutor
from scheduler.agent.jobs import JobRecord
from tests.agent.conftest import wait_until
from tests.agent.standin_portal import StandInPortal
from tests.agent.test_agent_process import start_agent  # noqa: F401 (the fixture)


def moment(event: dict) -> dt.datetime:
    return dt.datetime.fromisoformat(event["at"].replace("Z", "+00:00"))


def test_the_agent_reports_each_change_of_the_file_and_the_last_one_before_the_end(
    portal: StandInPortal, start_agent  # noqa: F811
) -> None:
    portal.assign(1, 'echo "$ROTA_CHECKPOINT_FILE"; echo step-1 > "$ROTA_CHECKPOINT_FILE"; sleep 0.5; '
                     'trap \'echo step-2 > "$ROTA_CHECKPOINT_FILE"; exit 0\' TERM; '
                     "while true; do sleep 0.05; done")  # fmt: skip
    agent = start_agent()
    [first] = wait_until(lambda: portal.events_of(1, "checkpoint"), timeout=15)
    assert first["attempt"] == 1
    time.sleep(0.6)
    assert len(portal.events_of(1, "checkpoint")) == 1, "a file that does not change is reported once"
    path = Path(portal.log_text(1).split()[0])
    assert path.name == "rota-checkpoint" and path.read_text() == "step-1\n"
    portal.unassign(1)  # stopped: the job saves its work in its grace period, then exits
    wait_until(lambda: portal.events_of(1, "exited"), timeout=15)
    checkpoints = portal.events_of(1, "checkpoint")
    assert len(checkpoints) == 2 and moment(checkpoints[1]) > moment(first)
    types = [e["type"] for e in portal.events_of(1)]
    assert types.index("exited") > max(i for i, t in enumerate(types) if t == "checkpoint"), types
    agent.send_signal(signal.SIGTERM)
    assert agent.wait(timeout=10) == 0


def test_a_container_job_touches_the_same_file_under_job(
    portal: StandInPortal, start_agent, images, tmp_path: Path  # noqa: F811
) -> None:
    vision = {"uid": 20001, "gid": 20001, "team": "vision"}
    portal.assign(1, 'echo "$ROTA_CHECKPOINT_FILE"; touch "$ROTA_CHECKPOINT_FILE"; sleep 60',
                  image="localhost/rota/busybox:1", run_as=vision)
    agent = start_agent("--executor", "container")
    try:
        [saved] = wait_until(lambda: portal.events_of(1, "checkpoint"), timeout=30)
        # (the event goes at the end of the pass that saw the file; the log in the next shipment)
        assert wait_until(lambda: portal.log_text(1), timeout=15) == "/job/rota-checkpoint\n"
        assert abs((moment(saved) - dt.datetime.now(dt.UTC)).total_seconds()) < 30
        assert (tmp_path / "work" / "jobs" / "1" / "rota-checkpoint").stat().st_uid == 20001
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=20) == 0
    finally:
        leftover = ContainerExecutor(tmp_path / "work")
        leftover.podman.remove(leftover.container_name(1, 1))


def record(started_at: float = 0.0, checkpoint_before: float | None = None) -> JobRecord:
    return JobRecord(job_id=5, attempt=2, pid=1, start_ticks=None, boot_id="", log_path="", status_path="",
                     started_at=started_at, checkpoint_before=checkpoint_before, gpus=[])


def test_a_file_left_by_an_earlier_attempt_or_a_link_is_not_a_checkpoint(tmp_path: Path) -> None:
    job_dir = tmp_path / "jobs" / "5"
    job_dir.mkdir(parents=True)
    (job_dir / "rota-checkpoint").write_text("old")
    job = record(checkpoint_before=modified_at(job_dir / "rota-checkpoint"))  # as it was before the launch
    assert checkpoint_events([job], tmp_path) == []
    (job_dir / "rota-checkpoint").unlink()
    os.symlink("/etc/hostname", job_dir / "rota-checkpoint")  # never followed
    assert changed_at(record(), job_dir / "rota-checkpoint") is None
    (job_dir / "rota-checkpoint").unlink()
    (job_dir / "rota-checkpoint").write_text("new")
    job = record()
    [event] = checkpoint_events([job], tmp_path)
    assert (event.job_id, event.attempt, event.type) == (5, 2, "checkpoint") and job.checkpoint_at is not None
    assert checkpoint_events([job], tmp_path) == []  # reported once


def test_a_job_that_saves_at_once_is_seen_though_the_file_s_time_is_before_the_agent_s_start(
    tmp_path: Path,
) -> None:
    """The kernel stamps files from a coarse clock, a tick behind the one the agent reads just after the
    launch: a job that saves at once leaves a time before its attempt's ``started_at``. The file as it was
    before the launch (here: none) is what tells this attempt's save from an earlier one's."""
    job_dir = tmp_path / "jobs" / "5"
    job_dir.mkdir(parents=True)
    (job_dir / "rota-checkpoint").write_text("saved at start")
    job = record(started_at=time.time() + 0.004)  # read just after the launch, a tick ahead of the stamp
    [event] = checkpoint_events([job], tmp_path)
    assert event.type == "checkpoint"


def test_an_older_agent_s_record_keeps_its_start_as_the_line(tmp_path: Path) -> None:
    job_dir = tmp_path / "jobs" / "5"
    job_dir.mkdir(parents=True)
    (job_dir / "rota-checkpoint").write_text("old")
    data = record(started_at=time.time() + 5).to_json()
    del data["checkpoint_before"]  # written before the agent noted the file before the launch
    assert checkpoint_events([JobRecord.from_json(data)], tmp_path) == []
    assert JobRecord.from_json(record().to_json()).checkpoint_before is None  # a new record: no file before


def test_a_file_written_just_before_the_exit_is_reported_before_the_end(tmp_path: Path) -> None:
    """The job saves and exits between the first look of a pass and its poll: the attempt that ended is
    looked at once more, and its checkpoint goes before its end event."""
    from scheduler.agent.checkpoints import checkpoints_then_ends
    from scheduler.agent.jobs import JobEvent

    job_dir = tmp_path / "jobs" / "5"
    job_dir.mkdir(parents=True)
    job = record(started_at=0.0)
    jobs = {job.key: job}

    def poll() -> list[JobEvent]:  # the job writes its file and its group is gone meanwhile
        (job_dir / "rota-checkpoint").write_text("saved")
        del jobs[job.key]
        return [JobEvent(5, 2, "stopped", "2026-12-06T00:00:00.000Z")]

    events = checkpoints_then_ends(jobs, tmp_path, poll)
    assert [e.type for e in events] == ["checkpoint", "stopped"]
