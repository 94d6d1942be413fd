"""Executors: how a node runs the attempts the portal assigns (``docs/executors.md``).

``open_executor`` picks one for ``--executor``: ``container`` (Podman; isolates tenants), ``process``
(the host; a laptop demo only) or ``auto``: the container executor where podman works, else the process
executor with a loud warning.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from scheduler.agent.executors.base import Executor
from scheduler.agent.executors.container import DEFAULT_IMAGE, ContainerExecutor
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
    default_image: str | None = DEFAULT_IMAGE,
    service_ip: str = "127.0.0.1",
) -> Executor:
    """The executor ``name`` (one of ``EXECUTOR_NAMES``) for an agent working in ``work_dir``."""
    if name not in EXECUTOR_NAMES:
        raise ValueError(f"executor must be one of {', '.join(EXECUTOR_NAMES)}, not {name!r}")
    if allow_run_as_self and name != "process":
        raise ExecutorUnavailable("--dev-run-as-self needs --executor process (a laptop demo only)")
    if name != "process":
        podman = Podman(containers_conf)
        problem = _container_problem(podman)
        if problem is None:
            return ContainerExecutor(
                work_dir, podman=podman, network=network, fake_gpus=fake_gpus, default_image=default_image,
                service_ip=service_ip,
            )
        if name == "container":
            raise ExecutorUnavailable(f"--executor container: {problem}")
        log.warning(
            "%s: using the PROCESS executor, which does NOT isolate tenants (jobs see the host, every GPU "
            "and the whole machine; no images, no limits)",
            problem,
        )
    return ProcessExecutor(work_dir, allow_run_as_self=allow_run_as_self)


def _container_problem(podman: Podman) -> str | None:
    """Why the container executor cannot run here, or None. It needs podman and a root agent (it takes
    each team's uid, makes device files and cgroups)."""
    if not podman.version():
        return "podman is not installed or does not work here (scripts/system-packages.sh installs it)"
    if os.geteuid() != 0:
        return "the node agent is not root, and the container executor needs root"
    return None
