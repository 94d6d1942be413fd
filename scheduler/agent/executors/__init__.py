"""Executors: how a node runs the attempts the portal assigns (``docs/executors.md``).

``open_executor`` picks one for ``--executor``: ``container`` (Podman; isolates tenants), ``process``
(the host; a laptop demo only) or ``auto``: the container executor where podman works, else the process
executor with a loud warning.
"""

from __future__ import annotations

import logging
from pathlib import Path

from scheduler.agent.executors.base import Executor
from scheduler.agent.executors.container import ContainerExecutor
from scheduler.agent.executors.podman import Podman
from scheduler.agent.executors.process import ProcessExecutor

EXECUTOR_NAMES = ("auto", "container", "process")
log = logging.getLogger(__name__)

__all__ = ["EXECUTOR_NAMES", "ContainerExecutor", "Executor", "ExecutorUnavailable", "ProcessExecutor",
           "open_executor"]


class ExecutorUnavailable(Exception):
    """The executor asked for cannot run here (the message says why)."""


def open_executor(
    name: str,
    work_dir: Path,
    *,
    containers_conf: Path | None = None,
    network: str = "none",
    fake_gpus: bool = False,
    allow_run_as_self: bool = False,
) -> Executor:
    """The executor ``name`` (one of ``EXECUTOR_NAMES``) for an agent working in ``work_dir``."""
    if name not in EXECUTOR_NAMES:
        raise ValueError(f"executor must be one of {', '.join(EXECUTOR_NAMES)}, not {name!r}")
    if allow_run_as_self and name != "process":
        raise ExecutorUnavailable("--dev-run-as-self needs --executor process (a laptop demo only)")
    if name != "process":
        podman = Podman(containers_conf)
        if podman.version():
            return ContainerExecutor(work_dir, podman=podman, network=network, fake_gpus=fake_gpus)
        if name == "container":
            raise ExecutorUnavailable("--executor container: podman is not installed or does not work here "
                                      "(scripts/system-packages.sh installs it)")
        log.warning("podman is not available: using the PROCESS executor, which does NOT isolate tenants "
                    "(jobs see the host, every GPU and the whole machine); install podman for containers")
    return ProcessExecutor(work_dir, allow_run_as_self=allow_run_as_self)
