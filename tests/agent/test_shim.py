"""The shim on its own (``scheduler/agent/shim.py``): a fork of the agent that runs one command as whom it is
told, with the launch's environment and none of the agent's descriptors or signal handlers."""

import json
import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from scheduler.agent import shim
from tests.agent.conftest import wait_until

STOPS = set(shim.STOPS)
ENV = {"PATH": os.environ["PATH"]}


def spawn(tmp_path: Path, *command: str, user: tuple[str, str] = ("-", "-"), env: dict[str, str] = ENV,
          cwd: Path | None = None) -> shim.Shim:
    """The shim as the executors start it (in ``tmp_path``): the stop signals blocked until it is ready, and
    its group there once ``spawn`` returns."""
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)
    try:
        started = shim.spawn(command, env, user, status_path=str(tmp_path / "status"),
                             cwd=str(cwd or tmp_path), log_path=str(tmp_path / "log"))
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    started.lead()
    return started


@pytest.fixture
def running(tmp_path: Path) -> Iterator[shim.Shim]:
    """A shim whose command sleeps (it has started once its ``started`` file exists); killed at the end."""
    started = spawn(tmp_path, "/bin/sh", "-c", "touch started; exec sleep 30")
    wait_until(lambda: (tmp_path / "started").exists())
    yield started
    os.killpg(started.pid, signal.SIGKILL)
    started.wait()


def status(tmp_path: Path) -> dict[str, object]:
    return json.loads((tmp_path / "status").read_text())


@pytest.mark.parametrize("user", [("abc", "20001"), ("20001", ""), ("-1", "20001"), ("20001x", "20001")])
def test_a_uid_or_gid_that_is_not_a_number_is_a_start_error_never_the_agents_own_user(tmp_path, user):
    """``-1`` would mean "unchanged" to setreuid: the command would run as the agent's user."""
    assert spawn(tmp_path, "/bin/sh", "-c", "id -u > uid", user=user).wait() == 127
    assert status(tmp_path)["start_error"] and not (tmp_path / "uid").exists()


def test_as_the_shim_the_command_runs_as_the_shims_own_user(tmp_path):
    assert spawn(tmp_path, "/bin/sh", "-c", "id -u > uid", user=("-", "-")).wait() == 0
    assert (tmp_path / "uid").read_text().strip() == str(os.getuid())
    assert status(tmp_path) == {"exit_code": 0, "signal": None}


def test_the_shim_is_a_fork_of_the_agent_not_a_new_interpreter(tmp_path, running):
    """No interpreter starts per job: the shim runs the agent's program (its command line and executable)
    under its own title."""
    for name in ("cmdline", "exe"):
        assert Path(f"/proc/{running.pid}/{name}").read_bytes() == Path(f"/proc/self/{name}").read_bytes()
    assert Path(f"/proc/{running.pid}/comm").read_text() == "rota-shim\n"
    assert os.getpgid(running.pid) == os.getsid(running.pid) == running.pid  # it leads the attempt's group


def test_the_shim_and_its_command_hold_none_of_the_agents_descriptors(tmp_path):
    """A shim runs for days: the agent's sockets (to the portal, to Redis) must not live on in it."""
    listener = socket.create_server(("127.0.0.1", 0))
    kept = os.open(os.devnull, os.O_RDONLY)
    os.set_inheritable(kept, True)  # even one the agent left inheritable
    try:
        started = spawn(tmp_path, "/bin/sh", "-c", "touch started; exec sleep 30")
        wait_until(lambda: (tmp_path / "started").exists())
        command = int(Path(f"/proc/{started.pid}/task/{started.pid}/children").read_text().split()[0])
        for pid in (started.pid, command):
            fds = {int(fd): os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
            assert fds == {0: "/dev/null", 1: str(tmp_path / "log"), 2: str(tmp_path / "log")}
        os.killpg(started.pid, signal.SIGKILL)
        started.wait()
    finally:
        listener.close()
        os.close(kept)


def test_the_agents_signal_handlers_are_not_the_shims(tmp_path):
    """A handler of the agent's would swallow a signal in the shim; there it has its default action."""
    seen: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, _frame: seen.append(signum))
    try:
        started = spawn(tmp_path, "/bin/sh", "-c", "touch started; exec sleep 30")
        wait_until(lambda: (tmp_path / "started").exists())
        os.kill(started.pid, signal.SIGUSR1)
        assert started.wait() == -signal.SIGUSR1 and seen == []
        os.killpg(started.pid, signal.SIGKILL)
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_a_stop_sent_as_soon_as_it_is_forked_is_held_and_reaches_the_command(tmp_path):
    """The shim is forked with the stop signals blocked: one that comes before it is ready does not kill it
    (it would leave no status), it waits and goes on to the command."""
    started = spawn(tmp_path, "/bin/sh", "-c", "exec sleep 30")
    os.killpg(started.pid, signal.SIGTERM)
    assert started.wait() == 128 + signal.SIGTERM
    assert status(tmp_path) == {"exit_code": None, "signal": signal.SIGTERM}


def test_the_command_gets_exactly_the_launchs_environment_and_is_found_on_its_path(tmp_path):
    """The agent's environment (its token) is not the job's; the program is looked up on the job's PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "show-env").symlink_to("/usr/bin/env")
    env = {"PATH": str(bin_dir), "ONLY": "this"}
    assert spawn(tmp_path, "show-env", env=env).wait() == 0
    assert (tmp_path / "log").read_text().splitlines() == [f"PATH={bin_dir}", "ONLY=this"]


def test_a_command_that_is_not_found_is_a_start_error(tmp_path):
    assert spawn(tmp_path, "no-such-program-here").wait() == 127
    assert "No such file" in str(status(tmp_path)["start_error"])


def test_a_working_directory_that_is_gone_is_a_start_error(tmp_path):
    """The agent goes on once the shim is forked; what fails in it is the shim's to record."""
    assert spawn(tmp_path, "true", cwd=tmp_path / "gone").wait() == 127
    assert "No such file or directory" in str(status(tmp_path)["start_error"])


def test_once_it_leads_the_attempts_group_exists(tmp_path):
    """So a stop the agent sends at once reaches it (a signal to a group not yet made would be lost)."""
    started = spawn(tmp_path, "/bin/sh", "-c", "exec sleep 30")
    assert os.getsid(started.pid) == os.getpgid(started.pid) == started.pid
    os.killpg(started.pid, signal.SIGKILL)
    assert started.wait() == -signal.SIGKILL
