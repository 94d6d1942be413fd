"""The executor's state file (``scheduler/agent/executors/statefile.py``): written in place in two slots used
in turn, read back whole or not at all, and a file from before the slots adopted."""

import json
import os

from scheduler.agent.executors import ProcessExecutor
from scheduler.agent.executors.statefile import StateFile
from tests.agent.test_executor import assignment, run_until_ended


def test_each_save_overwrites_the_older_slot_and_the_newest_is_read(tmp_path) -> None:
    state = StateFile(tmp_path, "agent-jobs")
    for n in range(1, 4):
        state.write(json.dumps({"n": n}))
    inodes = [slot.stat().st_ino for slot in state.slots]
    state.write(json.dumps({"n": 4}))
    assert [slot.stat().st_ino for slot in state.slots] == inodes  # overwritten, no new file renamed over it
    assert StateFile(tmp_path, "agent-jobs").read() == {"n": 4}
    assert all(os.stat(slot).st_mode & 0o777 == 0o600 for slot in state.slots)


def test_a_save_cut_short_reads_as_the_one_before(tmp_path) -> None:
    state = StateFile(tmp_path, "agent-jobs")
    state.write(json.dumps({"n": 1, "pad": "x" * 100}))
    state.write(json.dumps({"n": 2, "pad": "x" * 100}))
    newest = state.slots[state.seq % 2]
    whole = newest.read_bytes()
    for cut in (len(whole) - 1, len(whole) // 2, 5, 0):  # the crash came while the record was being written
        newest.write_bytes(whole[:cut])
        assert StateFile(tmp_path, "agent-jobs").read()["n"] == 1
    newest.write_bytes(whole.replace(b'"n":2', b'"n":3').replace(b'"n": 2', b'"n": 3'))  # a changed byte
    assert StateFile(tmp_path, "agent-jobs").read()["n"] == 1
    again = StateFile(tmp_path, "agent-jobs")
    again.read()
    again.write(json.dumps({"n": 5}))  # numbers on from what it read: the next record is the newest
    assert StateFile(tmp_path, "agent-jobs").read() == {"n": 5}


def test_nothing_saved_reads_as_none(tmp_path) -> None:
    assert StateFile(tmp_path, "agent-jobs").read() is None


def test_an_agent_upgraded_on_a_busy_node_adopts_the_file_from_before_the_slots(tmp_path) -> None:
    """An agent of the version before kept one file, renamed over at each save: the new agent adopts the jobs
    and ended attempts it holds, and the file is gone once the slots hold them."""
    before = ProcessExecutor(tmp_path / "agent")
    before.start(assignment(1, "true"))
    run_until_ended(before)
    before.start(assignment(2, "sleep 30"))
    legacy = before.work_dir / "agent-jobs.json"
    legacy.write_text(json.dumps(before.read_state()))
    for slot in before.state.slots:
        slot.unlink()
    after = ProcessExecutor(before.work_dir)
    try:
        [ended] = after.adopt()
        assert ended.job_id == 1 and "2:1" in after.jobs and after.has_run(1, 1)
        assert not legacy.exists() and after.read_state()["jobs"][0]["job_id"] == 2
    finally:
        after.stop_all("test", "done")
        run_until_ended(after)
