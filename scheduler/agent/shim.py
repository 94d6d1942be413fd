"""The shim: a fork of the agent that leads a job's process group, runs its command and writes how it ended.

``spawn`` forks the agent itself. The child becomes the leader of a new session (so the attempt is one
process group), starts the job's command inside that group, waits for it and writes its end to the status
file (``{"exit_code": N, "signal": S}``, or ``{"start_error": ...}`` when it could not start), then exits
like the command did. It survives the agent being killed, so an agent restarted after a crash still learns
the exit code from the file. SIGTERM, SIGINT and SIGHUP sent to the group reach the command; the shim
itself waits for the command to end (SIGKILL ends both). The agent forks it with those signals blocked,
so a stop that arrives before the shim is ready is held until it is, instead of killing it.

The shim stays the agent's user, so the job can neither signal it nor touch the status file; the
command drops to the team's identity (``setgroups([])``, ``setgid``, ``setuid``) before it execs, with
exactly the launch's environment and stdin from /dev/null.

Why a fork and not ``python shim.py``: an interpreter start per job was the largest CPU cost of a drain
(~15 ms of a node's CPU a job). A fork of a multi-threaded process is delicate, so the child is set up
before any of the agent's state can act: every signal blocked across the fork, the agent's handlers and
its SIGCHLD wake-up descriptor dropped, the garbage collector off (no finalizer of the agent's objects
runs here), every descriptor but the log closed (the agent's sockets must not live on in a shim that runs
for days), and it never returns into the agent's code (``os._exit`` in a ``finally``). Its memory is the
agent's, shared copy-on-write; what the agent rewrites meanwhile becomes the shim's own.
"""

from __future__ import annotations

import _signal
import gc
import json
import os
import signal
from collections.abc import Callable, Mapping, Sequence

STOPS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# Python ignores these at start; the command gets them at their default, as subprocess's restore_signals does.
RESTORED = tuple(getattr(signal, n) for n in ("SIGPIPE", "SIGXFZ", "SIGXFSZ") if hasattr(signal, n))
SIGNALS = tuple(_signal.valid_signals())  # plain numbers: the child resets them without the enum's cost
TITLE = b"rota-shim"  # what ``ps -e`` and ``pgrep rota-shim`` show (``ps -f``: the agent's command line)


class Shim:
    """The agent's handle on a shim it forked: its pid, when it leads its session (``lead``), and its return
    code once reaped (``wait``)."""

    def __init__(self, pid: int, leading: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._leading = leading  # a pipe's read end: the shim closes the other once it leads its session

    def lead(self) -> None:
        """Wait until the shim leads its own session, so that its group exists to be signalled (at once after
        the first call). The agent goes on with its bookkeeping meanwhile: the child's first steps (Python's
        after-fork work, its first page copies) take milliseconds."""
        if self._leading >= 0:
            while os.read(self._leading, 512):
                pass
            os.close(self._leading)
            self._leading = -1

    def wait(self) -> int | None:
        """Reap the shim, blocking until it exits: its return code (``-N``: killed by signal N); None when it
        was already reaped elsewhere."""
        self.lead()
        if self.returncode is None:
            try:
                self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
            except ChildProcessError:
                return None
        return self.returncode


def spawn(
    argv: Sequence[str], env: Mapping[str, str], user: tuple[str, str], *, status_path: str, cwd: str,
    log_path: str,
) -> Shim:
    """Fork the shim for ``argv`` (as ``user``: uid and gid, ``-`` for "as the shim") in ``cwd``, its output
    and the command's appended to ``log_path``. The caller blocks ``STOPS`` around this (the shim unblocks
    them once it is ready) and calls ``lead`` before it signals the attempt's group. What fails in the shim
    is its status file's ``start_error``. Raises OSError when it could not fork, ValueError for a NUL byte."""
    argv, env = list(argv), dict(env)
    if any("\0" in text for text in (*argv, *env, *env.values())):
        raise ValueError("embedded null byte")  # what exec would say, but here, before anything started
    log_fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    leading, led = os.pipe2(os.O_CLOEXEC)
    mask = _signal.pthread_sigmask(_signal.SIG_BLOCK, SIGNALS)  # _signal's: signal's builds enums (~50 us)
    pid = -1
    try:
        pid = os.fork()
        if pid == 0:  # the shim: never back into the agent's code, whatever happens
            code = 127
            try:
                code = _run(status_path, user, argv, env, lambda: _settle(led, log_fd, cwd, mask))
            finally:
                os._exit(code)
    finally:  # the agent only
        _signal.pthread_sigmask(_signal.SIG_SETMASK, mask)
        os.close(led)
        os.close(log_fd)
        if pid < 0:
            os.close(leading)
    return Shim(pid, leading)


def _settle(led: int, log_fd: int, cwd: str, mask: set[int | signal.Signals]) -> None:
    """First thing in the freshly forked child: forget the agent's signal handlers, its wake-up descriptor and
    its garbage, and lead a new session (then close ``led``: the agent may signal the group). Then the log as
    output, stdin from /dev/null, none of the agent's other descriptors, ``cwd``, the shim's title, and the
    caller's signal mask back."""
    gc.disable()
    _signal.set_wakeup_fd(-1)  # the agent's SIGCHLD wake-up pipe is the agent's alone
    for signum in SIGNALS:
        if callable(_signal.getsignal(signum)):
            _signal.signal(signum, _signal.SIG_DFL)
    os.setsid()
    os.close(led)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    os.chdir(cwd)
    try:
        comm = os.open("/proc/self/comm", os.O_WRONLY)
        os.write(comm, TITLE)
        os.close(comm)
    except OSError:
        pass  # a title only
    _signal.pthread_sigmask(_signal.SIG_SETMASK, mask)


def _run(
    status_path: str, user: tuple[str, str], command: list[str], env: dict[str, str],
    settle: Callable[[], None],
) -> int:
    """``settle``, start ``command``, wait for it, record its end in ``status_path``; the shim's exit status.
    What fails before the command runs (``settle`` included) is recorded as a ``start_error``."""
    early: list[int] = []
    try:  # any error: the set-up's may be other than OSError
        settle()
        for stop in STOPS:
            # A handler, not SIG_IGN, so the command starts with the default action.
            signal.signal(stop, lambda received, _frame: early.append(received))
        _signal.pthread_sigmask(_signal.SIG_UNBLOCK, STOPS)  # the agent forked us with them blocked
        pid = _start(command, env, *user)
    except Exception as error:  # noqa: BLE001 - whatever it is, it is the attempt's start error
        _write_status(status_path, json.dumps({"exit_code": None, "signal": None, "start_error": str(error)}))
        return 127
    if early:  # a stop that came before the command existed
        os.kill(pid, early[0])
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])  # retried by Python across our handlers
    exit_code, signum = (code, None) if code >= 0 else (None, -code)
    _write_status(status_path, json.dumps({"exit_code": exit_code, "signal": signum}))
    return code if code >= 0 else 128 - code


def _start(command: list[str], env: dict[str, str], uid: str, gid: str) -> int:
    """Fork and exec ``command`` with environment ``env`` (stdin from /dev/null, as ``uid``/``gid`` unless
    ``-``); its pid. A command that cannot be started raises OSError with the child's reason."""
    errors_read, errors_write = os.pipe2(os.O_CLOEXEC)  # closed by a successful exec: nothing read
    pid = os.fork()
    if pid == 0:  # the child: only os calls until exec, and never back into the shim's code
        try:
            _become_command(command, env, uid, gid, errors_write)
        except BaseException as error:  # noqa: BLE001 - whatever it is, the parent reports it
            os.write(errors_write, f"{error.__class__.__name__}: {error}".encode(errors="replace")[:4000])
        finally:
            os._exit(127)
    os.close(errors_write)
    reason = b""
    while chunk := os.read(errors_read, 4096):
        reason += chunk
    os.close(errors_read)
    if reason:
        os.waitpid(pid, 0)
        raise OSError(reason.decode(errors="replace"))
    return pid


def _become_command(command: list[str], env: dict[str, str], uid: str, gid: str, errors_fd: int) -> None:
    """In the command's child: default signals, stdin from /dev/null, no other descriptor, the team's
    identity, then exec (its program looked up on ``env``'s PATH)."""
    for signum in RESTORED:
        signal.signal(signum, signal.SIG_DFL)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.closerange(3, errors_fd)
    os.closerange(errors_fd + 1, os.sysconf("SC_OPEN_MAX"))
    if uid != "-":
        if not (uid.isdecimal() and gid.isdecimal()):  # "-1" would mean "unchanged": the agent's
            raise ValueError(f"not a uid and gid: {uid} {gid}")
        os.setgroups([])
        os.setregid(int(gid), int(gid))
        os.setreuid(int(uid), int(uid))
    os.execvpe(command[0], command, env)


def _write_status(path: str, text: str) -> None:
    temporary = f"{path}.tmp"
    with open(temporary, "w") as handle:
        handle.write(text)
    os.replace(temporary, path)
