"""Process-group facts from Linux's ``/proc``: who is still in a job's group, and signalling it.

A job's GPUs are free only when no process of its group is left. Zombies do not count (they hold no
memory and will be reaped by their parent or init), so the group is judged by scanning ``/proc`` rather
than by ``killpg(pgid, 0)``, which also succeeds for zombies.
"""

from __future__ import annotations

import logging
import os
import signal
from dataclasses import dataclass

log = logging.getLogger(__name__)
PROC = "/proc"


@dataclass(frozen=True, slots=True)
class ProcStat:
    """The fields of ``/proc/<pid>/stat`` the agent uses (start time in clock ticks since boot)."""

    pid: int
    state: str
    pgrp: int
    session: int
    start_ticks: int

    @property
    def zombie(self) -> bool:
        """True for a process that has exited and waits to be reaped."""
        return self.state in ("Z", "X")


def read_stat(pid: int) -> ProcStat | None:
    """Parse ``/proc/<pid>/stat``; None when the process does not exist."""
    try:
        with open(f"{PROC}/{pid}/stat", "rb") as handle:
            raw = handle.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2 :].split()  # the command name may contain spaces and parentheses
    return ProcStat(pid, fields[0], int(fields[2]), int(fields[3]), int(fields[19]))


def boot_id() -> str:
    """This boot's id: a pid recorded before a reboot means nothing after it."""
    try:
        with open(f"{PROC}/sys/kernel/random/boot_id") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def group_members(pgid: int) -> list[int]:
    """Pids of the live (non-zombie) processes of the process group ``pgid`` in session ``pgid``."""
    if not os.path.isdir(PROC):
        try:
            os.killpg(pgid, 0)
            return [pgid]
        except ProcessLookupError:
            return []
        except PermissionError:
            return [pgid]
    members = []
    # Every process of the host, at every job's end: kept lean (os.open and bytes, half read_stat's CPU).
    for entry in os.listdir(PROC):
        if not entry.isdigit():
            continue
        try:
            handle = os.open(f"{PROC}/{entry}/stat", os.O_RDONLY)
        except OSError:
            continue  # gone meanwhile
        try:
            raw = os.read(handle, 1024)  # the fields up to the session come well within (comm is <= 16 bytes)
        except OSError:
            continue
        finally:
            os.close(handle)
        fields = raw[raw.rfind(b")") + 2 :].split(None, 4)  # state, ppid, pgrp, session, the rest
        if len(fields) < 4 or int(fields[2]) != pgid or int(fields[3]) != pgid:
            continue
        if fields[0] not in (b"Z", b"X"):  # a zombie holds nothing
            members.append(int(entry))
    return members


def leader_alive(pid: int, start_ticks: int | None) -> bool:
    """True while the process ``pid`` that started at ``start_ticks`` runs (not a zombie, not a reuse)."""
    stat = read_stat(pid)
    if stat is None or stat.zombie:
        return False
    return start_ticks is None or stat.start_ticks == start_ticks


def signal_group(pgid: int, signum: int) -> None:
    """Send ``signum`` to every process of the group; a group already gone is not an error."""
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        pass
    except PermissionError as error:
        log.error("cannot signal process group %d with %s: %s", pgid, signal.Signals(signum).name, error)


def child_exited(pid: int) -> bool:
    """True when our child ``pid`` has exited, without reaping it.

    The zombie keeps its pid, and with it the process group id, from being reused, so signalling the
    group stays safe until the caller reaps the child (``Shim.wait``) once the whole group is gone.
    """
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True
