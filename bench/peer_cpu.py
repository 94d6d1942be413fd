"""CPU seconds spent by groups of processes, read from /proc: on a box shared with other work the wall clock
says little, but what a drain costs each part in CPU is the same whoever else runs (``bench/peer.py``)."""

from __future__ import annotations

import os
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def _stats() -> dict[int, tuple[int, str, float, float]]:
    """pid -> (parent pid, command line, CPU seconds of it, CPU seconds of its reaped children)."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        # after the name: state ppid ... utime(12) stime(13) cutime(14) cstime(15), counted from state = 0
        own, reaped = (sum(int(v) for v in fields[i:i + 2]) / TICK for i in (11, 13))
        out[int(entry.name)] = (int(fields[1]), cmdline, own, reaped)
    return out


def cpu_by_group(roots: dict[str, int], database: str | None = None) -> dict[str, float]:
    """CPU seconds of each named process tree (root pid and every descendant alive, with what they reaped) and,
    with ``database``, of the PostgreSQL backends serving it (as ``postgres``)."""
    stats = _stats()
    children: dict[int, list[int]] = {}
    for pid, (ppid, *_rest) in stats.items():
        children.setdefault(ppid, []).append(pid)
    groups = {}
    for name, root in roots.items():
        total, todo = 0.0, [root]
        while todo:
            pid = todo.pop()
            if pid in stats:
                total += stats[pid][2] + stats[pid][3]
                todo.extend(children.get(pid, []))
        groups[name] = total
        if root in stats and stats[root][3]:  # what the root's reaped children (an agent's jobs) took
            groups[f"{name} (reaped children)"] = stats[root][3]
    if database:
        groups["postgres"] = sum(cpu for _ppid, cmd, cpu, _reaped in stats.values()
                                 if cmd.startswith("postgres: ") and f" {database} " in cmd)
    return groups


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {name: round(after[name] - before.get(name, 0.0), 2) for name in after}


def children_named(pid: int, names: dict[str, str]) -> dict[str, int]:
    """The topmost descendants of ``pid`` whose command line contains a key of ``names``, by its value (the
    group name): honcho runs each of its processes under a process of its own."""
    stats = _stats()
    children: dict[int, list[int]] = {}
    for child, (ppid, *_rest) in stats.items():
        children.setdefault(ppid, []).append(child)
    out, todo = {}, list(children.get(pid, []))
    while todo:
        child = todo.pop()
        group = next((g for needle, g in names.items() if needle in stats[child][1]), None)
        if group:
            out.setdefault(group, child)
        else:
            todo.extend(children.get(child, []))
    return out
