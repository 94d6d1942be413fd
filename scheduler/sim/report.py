"""Render replay summaries: a side-by-side human table (policies as columns) or JSON."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

Summary = dict[str, object]

_HOUR = 3600.0


def _hours(value: object) -> str:
    return f"{float(value) / _HOUR:.2f} h"  # type: ignore[arg-type]


def _ratio(value: object) -> str:
    return f"{float(value):.3f}"  # type: ignore[arg-type]


def _count(value: object) -> str:
    return f"{int(value):,}"  # type: ignore[call-overload]


def _seconds(value: object) -> str:
    return f"{float(value):.1f} s"  # type: ignore[arg-type]


def _gpu_hours(value: object) -> str:
    return f"{float(value):,.0f}"  # type: ignore[arg-type]


ROWS: tuple[tuple[str, str, Callable[[object], str]], ...] = (
    ("jobs", "jobs", _count),
    ("completed", "completed", _count),
    ("unfinished", "unfinished", _count),
    ("avg_jct_s", "avg JCT", _hours),
    ("jct_lower_bound_s", "  lower bound (mean duration)", _hours),
    ("p50_jct_s", "p50 JCT", _hours),
    ("p95_jct_s", "p95 JCT", _hours),
    ("p99_jct_s", "p99 JCT", _hours),
    ("avg_queue_s", "avg queueing delay", _hours),
    ("p50_queue_s", "p50 queueing delay", _hours),
    ("p95_queue_s", "p95 queueing delay", _hours),
    ("p99_queue_s", "p99 queueing delay", _hours),
    ("makespan_s", "makespan", _hours),
    ("utilization", "GPU utilization", _ratio),
    ("utilization_bound", "  bound min(1, offered/capacity)", _ratio),
    ("utilization_allocated", "  allocated (incl. lost)", _ratio),
    ("preemptions", "preemptions", _count),
    ("gpu_hours_lost", "GPU-hours lost", _gpu_hours),
    ("jain_slowdown", "Jain index (team slowdown)", _ratio),
    ("jain_share", "Jain index (share/entitlement)", _ratio),
    ("worst_starved_s", "starved below guarantee (worst team)", _hours),
    ("longest_starved_s", "  longest stretch", _hours),
    ("quota_violations", "quota violations", _count),
    ("invariant_violations", "invariant violations", _count),
    ("apply_errors", "decision errors", _count),
    ("cycles", "scheduling cycles", _count),
    ("engine_s", "engine time", _seconds),
    ("wall_s", "wall time", _seconds),
)

PACKING_ROWS: tuple[tuple[str, str], ...] = (
    ("peak_allocated_gpus", "peak allocated GPUs"),
    ("unallocated_gpus_at_peak", "unallocated GPUs at peak"),
    ("free_gpus_while_pending", "free GPUs while jobs waited"),
)


def _grid(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Align a table: first column left, the others right."""
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    lines = []
    for n, row in enumerate([header, *rows]):
        cells = [str(row[0]).ljust(widths[0])] + [
            str(c).rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
        ]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return lines


def format_table(summaries: Sequence[Summary], title: str = "") -> str:
    """Policies side by side, then per-team figures (received share vs entitlement, JCT, starvation)."""
    names = [str(s["policy"]) for s in summaries]
    lines = [title] if title else []
    rows = [[label] + [fmt(s[key]) for s in summaries] for key, label, fmt in ROWS]
    if all("packing" in s for s in summaries):
        for key, label in PACKING_ROWS:
            values = [s["packing"].get(key) for s in summaries]  # type: ignore[attr-defined]
            rows.append([label] + ["-" if v is None else f"{float(v):,.1f}" for v in values])
    lines += _grid(["metric", *names], rows)
    teams = sorted({t for s in summaries for t in s["teams"]})  # type: ignore[union-attr]
    if teams:
        lines += [
            "",
            "per team: guarantee, entitlement and offered share; then per policy received share "
            "(while jobs waited), avg JCT, hours starved below guarantee and the longest stretch in minutes",
        ]
        header = ["team", "guar.", "entitled", "offered"]
        for name in names:
            header += [f"{name} recv", f"{name} JCT", f"{name} starved", f"{name} longest"]
        team_rows = []
        first = summaries[0]["teams"]  # type: ignore[index]
        for team in teams:
            base = first.get(team, {})  # type: ignore[union-attr]
            row = [
                team,
                f"{base.get('guaranteed_gpus', 0.0):.1f}",
                f"{base.get('entitlement_share', 0.0):.1%}",
                f"{base.get('offered_share', 0.0):.1%}",
            ]
            for s in summaries:
                t = s["teams"].get(team, {})  # type: ignore[union-attr]
                row += [
                    f"{t.get('received_share', 0.0):.1%}",
                    _hours(t.get("avg_jct_s", 0.0)),
                    f"{t.get('starved_s', 0.0) / _HOUR:.1f}",
                    f"{t.get('longest_starved_s', 0.0) / 60:.0f} min",
                ]
            team_rows.append(row)
        lines += _grid(header, team_rows)
    problems = [(str(s["policy"]), p) for s in summaries for p in s.get("problems", [])]  # type: ignore[attr-defined]
    if problems:
        lines += ["", "problems (first few):"] + [f"  {name}: {p}" for name, p in problems]
    return "\n".join(lines)


def format_json(summaries: Sequence[Summary], context: dict[str, object]) -> str:
    """The machine form: the run's context (trace, cluster, quotas, config) and one summary per policy."""
    return json.dumps({**context, "results": list(summaries)}, indent=2, sort_keys=False)
