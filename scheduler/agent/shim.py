"""Run one job command and write down how it ended: ``python shim.py STATUS_FILE UID GID ARGV...``.

The agent starts this small program as the leader of the job's process group (its own session), and it
starts the job's command inside that group. It survives the agent being killed, so an agent restarted
after a crash can still learn the job's exit code from STATUS_FILE (``{"exit_code": N, "signal": S}``).
SIGTERM, SIGINT and SIGHUP sent to the group reach the command; the shim itself waits for the command
to end (SIGKILL ends both). The agent starts it with those signals blocked, so a stop that arrives
before the shim is ready is held until it is, instead of killing it. Standard library only: it runs
with ``python -I -S``.

UID and GID (``-`` for "as the shim") are whom the command runs as: the shim stays with the agent's user,
so the job can neither signal it nor touch STATUS_FILE, and the command drops to the team's identity
(``setgroups([])``, ``setgid``, ``setuid``) before it execs.
"""

import json
import os
import signal
import subprocess
import sys


def _write_status(path: str, status: dict) -> None:
    temporary = f"{path}.tmp"
    with open(temporary, "w") as handle:
        json.dump(status, handle)
    os.replace(temporary, path)


def main(argv: list[str]) -> int:
    """Start ``argv[2:]``, wait for it, record its end in ``argv[1]``; exit like the command did."""
    status_path, uid, gid, command = argv[1], argv[2], argv[3], argv[4:]
    identity = {} if uid == "-" else {"user": int(uid), "group": int(gid), "extra_groups": []}
    stops = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    early: list[int] = []
    for signum in stops:
        # A handler, not SIG_IGN, so the command starts with the default action.
        signal.signal(signum, lambda received, _frame: early.append(received))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)  # the agent started us with them blocked
    try:
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL, **identity)
    except (OSError, subprocess.SubprocessError) as error:
        _write_status(status_path, {"exit_code": None, "signal": None, "start_error": str(error)})
        return 127
    if early:  # a stop that came before the command existed
        child.send_signal(early[0])
    code = child.wait()
    _write_status(
        status_path, {"exit_code": code if code >= 0 else None, "signal": -code if code < 0 else None}
    )
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
