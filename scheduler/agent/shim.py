"""Run one job command and write down how it ended: ``python shim.py STATUS_FILE UID GID ARGV...``.

The agent starts this small program as the leader of the job's process group (its own session), and it
starts the job's command inside that group. It survives the agent being killed, so an agent restarted
after a crash can still learn the job's exit code from STATUS_FILE (``{"exit_code": N, "signal": S}``).
SIGTERM, SIGINT and SIGHUP sent to the group reach the command; the shim itself waits for the command
to end (SIGKILL ends both). The agent starts it with those signals blocked, so a stop that arrives
before the shim is ready is held until it is, instead of killing it. It runs with ``python -I -S`` and
imports only ``os`` and ``_signal`` (built in): one shim starts per job, and ``subprocess``, ``signal`` and
``json`` with what they pull in (``re``, ``enum``, ``locale``) cost a busy node about 20 ms of CPU a job.

UID and GID (``-`` for "as the shim") are whom the command runs as: the shim stays with the agent's user,
so the job can neither signal it nor touch STATUS_FILE, and the command drops to the team's identity
(``setgroups([])``, ``setgid``, ``setuid``) before it execs.
"""

import _signal
import os
import sys

STOPS = (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP)
# Python ignores these at start; the command gets them at their default, as subprocess's restore_signals does.
RESTORED = tuple(getattr(_signal, n) for n in ("SIGPIPE", "SIGXFZ", "SIGXFSZ") if hasattr(_signal, n))


def _write_status(path: str, text: str) -> None:
    temporary = f"{path}.tmp"
    with open(temporary, "w") as handle:
        handle.write(text)
    os.replace(temporary, path)


def _start(command: list[str], uid: str, gid: str) -> int:
    """Fork and exec ``command`` (stdin from /dev/null, as ``uid``/``gid`` unless ``-``); its pid. A command
    that cannot be started raises OSError with the child's reason."""
    errors_read, errors_write = os.pipe2(os.O_CLOEXEC)  # closed by a successful exec: nothing read
    pid = os.fork()
    if pid == 0:  # the child: only os calls until exec, and never back into the shim's code
        try:
            for signum in RESTORED:
                _signal.signal(signum, _signal.SIG_DFL)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.closerange(3, errors_write)
            os.closerange(errors_write + 1, os.sysconf("SC_OPEN_MAX"))
            if uid != "-":
                if not (uid.isdecimal() and gid.isdecimal()):  # "-1" would mean "unchanged": the agent's
                    raise ValueError(f"not a uid and gid: {uid} {gid}")
                os.setgroups([])
                os.setregid(int(gid), int(gid))
                os.setreuid(int(uid), int(uid))
            os.execvp(command[0], command)
        except BaseException as error:  # noqa: BLE001 - whatever it is, the parent reports it
            os.write(errors_write, f"{error.__class__.__name__}: {error}".encode(errors="replace")[:4000])
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


def main(argv: list[str]) -> int:
    """Start ``argv[4:]``, wait for it, record its end in ``argv[1]``; exit like the command did."""
    status_path, uid, gid, command = argv[1], argv[2], argv[3], argv[4:]
    early: list[int] = []
    for signum in STOPS:
        # A handler, not SIG_IGN, so the command starts with the default action.
        _signal.signal(signum, lambda received, _frame: early.append(received))
    _signal.pthread_sigmask(_signal.SIG_UNBLOCK, STOPS)  # the agent started us with them blocked
    try:
        pid = _start(command, uid, gid)
    except OSError as error:
        import json  # the rare path: the message may need escaping

        _write_status(status_path, json.dumps({"exit_code": None, "signal": None, "start_error": str(error)}))
        return 127
    if early:  # a stop that came before the command existed
        os.kill(pid, early[0])
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])  # retried by Python across our handlers
    exit_code, signum = (code, "null") if code >= 0 else ("null", -code)
    _write_status(status_path, f'{{"exit_code": {exit_code}, "signal": {signum}}}')
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
