"""Whom a job runs as, and the private places it gets on the node.

Each team maps to its own unprivileged uid/gid (the assignment's ``run_as``, from the portal's range).
A root agent starts every job as that identity, so one team can neither read, write nor signal another
team's jobs or files. The agent's own files stay the agent's: the work dir can be traversed but not
listed, each job's directory and log are mode 0700/0600 and owned by the job's team, and ``run/``
(status and environment files) and the state file are the agent's alone.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from scheduler.agent.jobs import RunAs

DEV_FLAG = "--dev-run-as-self"


class IdentityRefused(Exception):
    """The job's team identity cannot be taken here; the message says why and what to do."""


@dataclass(frozen=True, slots=True)
class Identity:
    """Whom the command runs as: ``uid``/``gid``, or None for the agent's own user; ``note`` for the event."""

    uid: int | None = None
    gid: int | None = None
    note: str = ""


def job_identity(run_as: RunAs | None, *, allow_self: bool) -> Identity:
    """The identity a job runs as on this node.

    No ``run_as`` (an old portal) keeps the old behaviour: the agent's own user. A root agent takes the
    team's uid/gid. An agent that is not root refuses, unless started with ``--dev-run-as-self`` (a laptop
    demo), and then says in the job's event that it ran as itself.
    """
    if run_as is None:
        return Identity()
    euid, egid = os.geteuid(), os.getegid()
    if euid == 0:
        return Identity(run_as.uid, run_as.gid)
    team = f"team {run_as.team}'s" if run_as.team else "the team's"
    if (euid, egid) == (run_as.uid, run_as.gid):
        return Identity()
    if allow_self:
        return Identity(
            note=f"ran as the node agent's own user (uid {euid}), not as {team} uid {run_as.uid}: "
            f"the agent runs with {DEV_FLAG} and does not separate teams"
        )
    raise IdentityRefused(
        f"cannot run as {team} uid {run_as.uid}: the node agent is not root (uid {euid}); run the agent as "
        f"root, or for a laptop demo start it with --executor process {DEV_FLAG}"
    )


def prepare_work_dir(work_dir: Path) -> Path:
    """Create the agent's work dir: ``jobs/`` can be traversed by jobs, ``logs/`` and ``run/`` cannot."""
    work_dir.mkdir(parents=True, exist_ok=True)
    for sub, mode in (("jobs", 0o711), ("logs", 0o700), ("run", 0o700)):
        (work_dir / sub).mkdir(exist_ok=True)
        (work_dir / sub).chmod(mode)
    work_dir.chmod(0o711)
    return work_dir


def private_dir(path: Path, who: Identity) -> None:
    """A directory only the job's identity may enter (mode 0700, owned by it)."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o700)
    if who.uid is not None:
        os.chown(path, who.uid, who.gid if who.gid is not None else -1)


def private_file(path: Path, who: Identity) -> None:
    """A file (created empty if missing) only the job's identity may read (mode 0600, owned by it)."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
    path.chmod(0o600)
    if who.uid is not None:
        os.chown(path, who.uid, who.gid if who.gid is not None else -1)


def secret_file_problem(path: Path) -> str | None:
    """Why ``path`` is not fit to hold the node token (readable by group or others), or None."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return None  # reading it will say what is wrong
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        return (f"{path} is readable by others (mode {stat.S_IMODE(mode):04o}): a job could read the node "
                f"token; chmod 600 it")
    return None
