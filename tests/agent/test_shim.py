"""The shim on its own (``scheduler/agent/shim.py``): whom it runs the command as."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler.agent.executors.launch import SHIM

STOPS = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}


def spawn(tmp_path: Path, *command: str, user: tuple[str, str]) -> subprocess.Popen[bytes]:
    """The shim as the executors start it (in ``tmp_path``): a new session, the stop signals blocked until it
    is ready."""
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)
    try:
        return subprocess.Popen([sys.executable, "-I", "-S", SHIM, str(tmp_path / "status"), *user, *command],
                                cwd=tmp_path, stdin=subprocess.DEVNULL, start_new_session=True)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


@pytest.mark.parametrize("user", [("abc", "20001"), ("20001", ""), ("-1", "20001"), ("20001x", "20001")])
def test_a_uid_or_gid_that_is_not_a_number_is_a_start_error_never_the_agents_own_user(tmp_path, user):
    """``-1`` would mean "unchanged" to setreuid: the command would run as the agent's user."""
    proc = spawn(tmp_path, "/bin/sh", "-c", "id -u > uid", user=user)
    assert proc.wait(10) == 127
    recorded = json.loads((tmp_path / "status").read_text())
    assert recorded["start_error"] and not (tmp_path / "uid").exists()


def test_as_the_shim_the_command_runs_as_the_shims_own_user(tmp_path):
    proc = spawn(tmp_path, "/bin/sh", "-c", "id -u > uid", user=("-", "-"))
    assert proc.wait(10) == 0
    assert (tmp_path / "uid").read_text().strip() == str(os.getuid())
