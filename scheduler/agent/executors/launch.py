"""Launching an attempt through the shim, and reading how it ended: what every executor does the same way.

An executor decides *what* runs (a ``Launch``: argv, environment, as whom); ``shim_spawn`` forks the shim
(``scheduler/agent/shim.py``) as the leader of a new session with the job's log as its output, and
``shim_outcome`` reads the status file the shim writes when the command ends (or, without one, what the
shim's own return code says). The job's environment starts from ``INHERITED_ENV`` and ``rota_env``.
"""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass
from pathlib import Path

from scheduler.agent import shim
from scheduler.agent.jobs import Assignment, JobRecord

STOP_SIGNALS = set(shim.STOPS)
# Variables of the agent's own environment a job inherits; nothing else (the agent's token stays here).
INHERITED_ENV = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LC_ALL",
    "TZ",
    "TMPDIR",
    "SHELL",
    "LD_LIBRARY_PATH",
)


def visible_devices(assignment: Assignment) -> str:
    """``CUDA_VISIBLE_DEVICES`` for an assignment: GPU indices, or device UUIDs when MIG slices are in it."""
    if any(gpu.uuid.startswith("MIG-") for gpu in assignment.gpus):
        return ",".join(gpu.uuid for gpu in assignment.gpus)
    return ",".join(str(gpu.index) for gpu in assignment.gpus)


def rota_env(assignment: Assignment) -> dict[str, str]:
    """The variables an assignment sets, then Rota's own (which a job's ``env`` cannot override)."""
    return {
        **assignment.env,
        "ROTA_JOB_ID": str(assignment.job_id),
        "ROTA_ATTEMPT": str(assignment.attempt),
        "CUDA_VISIBLE_DEVICES": visible_devices(assignment),
    }


@dataclass(frozen=True, slots=True)
class Launch:
    """What the shim runs: ``argv`` with environment ``env``, as ``user`` (the shim's UID GID arguments)."""

    argv: list[str]
    env: dict[str, str]
    user: tuple[str, str] = ("-", "-")
    container: str = ""
    notes: tuple[str, ...] = ()


def shim_spawn(launch: Launch, *, status_path: Path, job_dir: Path, log_path: Path) -> shim.Shim:
    """Fork the shim for ``launch`` in ``job_dir``, leading a new session, its output (and the command's)
    appended to ``log_path``; the shim writes how the command ended to ``status_path``. The caller blocks
    ``STOP_SIGNALS`` around this (the shim unblocks them once it is ready), and calls the shim's ``lead``
    before it may signal the attempt's group."""
    return shim.spawn(launch.argv, launch.env, launch.user, status_path=str(status_path), cwd=str(job_dir),
                      log_path=str(log_path))


def shim_outcome(job: JobRecord, returncode: int | None) -> tuple[int | None, int | None, str, bool]:
    """How ``job``'s command ended, once its group is gone (``returncode``: the shim's, None when it was not
    this agent's child): (exit code, signal, message, whether the command started at all).

    The shim's status file is the truth; without it (the shim was killed too, or its record is lost)
    the shim's own return code, or failing that the agent's SIGKILL, tells how the attempt ended.
    """
    try:
        status = json.loads(Path(job.status_path).read_text())
    except (OSError, ValueError):
        status = None
    if isinstance(status, dict):
        if status.get("start_error"):
            return None, None, f"cannot start: {status['start_error']}", False
        return status.get("exit_code"), status.get("signal"), "", True
    if returncode is not None and returncode < 0:
        return None, -returncode, "", True
    if job.killed:
        return None, signal.SIGKILL.value, "", True
    if returncode is not None:
        return returncode, None, "", True
    return None, None, "exit status unknown: the job ended while no agent was watching", True
