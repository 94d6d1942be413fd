"""The memory cgroup a container job runs under, so the agent can tell an OOM kill from any other SIGKILL.

Podman's own ``OOMKilled`` stays false on these hybrid cgroup v1 machines, and a container's cgroup is
gone once it exits. So the agent makes one parent cgroup per attempt (``/rota/<container>``, given to
``podman run --cgroup-parent``), puts the memory limit (and the same memory+swap limit: no swap) on it,
and reads it after the container ended: an attempt SIGKILLed while its cgroup had reached its limit
(cgroup v1: ``memory.max_usage_in_bytes``; v2: ``oom_kill`` in ``memory.events``) was OOM-killed.
"""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)
ROOT = Path("/sys/fs/cgroup")
PARENT = "rota"


def _v1() -> bool:
    return (ROOT / "memory" / "memory.limit_in_bytes").exists()


def job_cgroup_dir(name: str, root: Path = ROOT) -> Path:
    """The memory cgroup directory of one attempt (v1's memory hierarchy, or the v2 tree)."""
    base = root / "memory" if (root / "memory" / "memory.limit_in_bytes").exists() else root
    return base / PARENT / name


def create(name: str, memory_mb: int) -> str:
    """Create the attempt's parent cgroup with its memory limit; returns the ``--cgroup-parent`` value."""
    limit = str(memory_mb * 1024 * 1024)
    path = job_cgroup_dir(name)
    if _v1():
        path.mkdir(parents=True, exist_ok=True)
        (path / "memory.limit_in_bytes").write_text(limit)
        swap = path / "memory.memsw.limit_in_bytes"
        if swap.exists():
            swap.write_text(limit)
    else:
        (ROOT / PARENT).mkdir(exist_ok=True)
        (ROOT / "cgroup.subtree_control").write_text("+memory +pids +cpu")
        (ROOT / PARENT / "cgroup.subtree_control").write_text("+memory +pids +cpu")
        path.mkdir(exist_ok=True)
        (path / "memory.max").write_text(limit)
        (path / "memory.swap.max").write_text("0")
    return f"/{PARENT}/{name}"


def reached_limit(name: str) -> bool:
    """True when the attempt's memory cgroup ran out of memory (read after its container ended)."""
    path = job_cgroup_dir(name)
    try:
        if _v1():
            limit = int((path / "memory.limit_in_bytes").read_text())
            peak = int((path / "memory.max_usage_in_bytes").read_text())
            return peak >= limit
        events = dict(line.split() for line in (path / "memory.events").read_text().splitlines())
        return int(events.get("oom_kill", 0)) > 0
    except (OSError, ValueError):
        return False


def remove(name: str) -> None:
    """Remove the attempt's cgroups (what podman left under them first), in every hierarchy."""
    roots = [p for p in ROOT.iterdir() if p.is_dir()] if _v1() else [ROOT]
    for root in roots:
        path = root / PARENT / name
        if not path.is_dir():
            continue
        for child in sorted(path.rglob("*"), key=lambda p: -len(p.parts)):
            if child.is_dir():
                _rmdir(child)
        _rmdir(path)


def _rmdir(path: Path) -> None:
    try:
        path.rmdir()
    except OSError as error:
        log.warning("cannot remove cgroup %s: %s", path, error)
