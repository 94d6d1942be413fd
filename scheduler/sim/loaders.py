"""Trace loaders: Philly (Pollux CSV), Alibaba openb pods, and Rota's generic CSV.

Every loader returns a :class:`~scheduler.sim.trace.Trace` whose jobs are sorted by submit time, with
times shifted so that 0 is the window start (or the first submit). A malformed row raises
:class:`~scheduler.sim.trace.TraceError` naming the file, the line number and the column.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from scheduler.sim.trace import Trace, TraceError, TraceJob, TraceNode

FORMATS = ("philly", "generic", "openb")

# A workload kind's default priority class (DESIGN.md: each kind has defaults).
KIND_DEFAULT_CLASS = {
    "training": "training",
    "inference": "production-inference",
    "notebook": "interactive",
    "data-processing": "batch",
    "evaluation": "batch",
    "agent": "interactive",
}

# openb QoS classes -> (workload kind, priority class).
OPENB_QOS = {
    "LS": ("inference", "production-inference"),
    "Guaranteed": ("training", "training"),
    "Burstable": ("data-processing", "batch"),
    "BE": ("data-processing", "best-effort"),
}

Bound = float | datetime


@dataclass(frozen=True, slots=True)
class Window:
    """Keep jobs with ``start <= submit < end``. Bounds are dates (dated traces) or seconds (others)."""

    start: Bound | None = None
    end: Bound | None = None

    def contains(self, submit: Bound) -> bool:
        """True when ``submit`` lies inside the window."""
        if self.start is not None and submit < self.start:  # type: ignore[operator]
            return False
        return self.end is None or submit < self.end  # type: ignore[operator]


def parse_bound(text: str | None) -> Bound | None:
    """Parse a ``--start``/``--end`` value: seconds (``3600``) or an ISO date/datetime (``2017-10-09``)."""
    if text is None or text == "":
        return None
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"bad time bound {text!r}: expected seconds or an ISO date such as 2017-10-09"
        ) from None


def _rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """Yield (line number, row) for a CSV file with a header; check the required columns exist."""
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise TraceError(f"{path}: cannot open: {exc.strerror}") from None
    with handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header is None:
            raise TraceError(f"{path}:1: empty file, expected a header with {', '.join(required)}")
        header = [name.strip() for name in header]
        missing = [name for name in required if name not in header]
        if missing:
            raise TraceError(
                f"{path}:1: missing column(s) {', '.join(missing)}; header is {','.join(header)}"
            )
        width = len(header)
        for values in reader:
            if not values or (len(values) == 1 and not values[0].strip()):
                continue
            if len(values) != width:
                raise TraceError(f"{path}:{reader.line_num}: expected {width} columns, found {len(values)}")
            yield reader.line_num, dict(zip(header, values, strict=True))


class _Cell:
    """Typed access to one row's cells with errors that name file, line and column."""

    __slots__ = ("line", "path", "row")

    def __init__(self, path: Path, line: int, row: dict[str, str]) -> None:
        self.path, self.line, self.row = path, line, row

    def fail(self, column: str, expected: str) -> TraceError:
        """Build the error for a bad cell."""
        value = self.row.get(column, "")
        return TraceError(f"{self.path}:{self.line}: column {column!r}: expected {expected}, got {value!r}")

    def text(self, column: str, default: str = "") -> str:
        """The stripped cell, or ``default`` when the column is absent or empty."""
        return self.row.get(column, "").strip() or default

    def number(self, column: str, *, minimum: float = 0.0, positive: bool = False) -> float:
        """A finite float >= ``minimum`` (> 0 when ``positive``)."""
        try:
            value = float(self.row.get(column, ""))
        except ValueError:
            raise self.fail(column, "a number") from None
        if not math.isfinite(value) or value < minimum or (positive and value <= 0):
            raise self.fail(column, "a positive number" if positive else f"a number >= {minimum:g}")
        return value

    def optional_number(self, column: str) -> float | None:
        """Like :meth:`number` (positive) but an empty cell gives None."""
        return None if not self.text(column) else self.number(column, positive=True)

    def integer(self, column: str, *, minimum: int = 0) -> int:
        """A whole number >= ``minimum`` (``4`` and ``4.0`` both accepted)."""
        value = self.number(column, minimum=minimum)
        if value != int(value):
            raise self.fail(column, "a whole number")
        return int(value)

    def timestamp(self, column: str) -> datetime:
        """An ISO datetime such as ``2017-10-09 07:01:55``."""
        try:
            return datetime.fromisoformat(self.row.get(column, "").strip())
        except ValueError:
            raise self.fail(column, "a date and time such as 2017-10-09 07:01:55") from None


def _check_window_kind(window: Window, dated: bool, path: Path) -> None:
    """Refuse a window whose bounds do not match the trace's clock (dates vs seconds)."""
    for bound in (window.start, window.end):
        if bound is not None and isinstance(bound, datetime) != dated:
            want = "dates (e.g. 2017-10-09)" if dated else "seconds"
            raise TraceError(f"{path}: this trace's submit times are {want}; got time bound {bound!r}")


def _finish(
    raw: list[tuple[Bound, TraceJob]],
    window: Window,
    path: Path,
    fmt: str,
    skipped: dict[str, int],
    nodes: tuple[TraceNode, ...] = (),
) -> Trace:
    """Shift submit times to the trace origin and sort the jobs."""
    if not raw:
        return Trace(jobs=(), source=str(path), format=fmt, nodes=nodes, skipped=skipped)
    first = min(submit for submit, _ in raw)
    origin_bound = window.start if window.start is not None else first
    origin: datetime | None = None
    if isinstance(origin_bound, datetime):
        origin = origin_bound

        def offset(value: Bound) -> float:
            return (value - origin_bound).total_seconds()  # type: ignore[operator]
    else:

        def offset(value: Bound) -> float:
            return float(value) - float(origin_bound)  # type: ignore[arg-type]

    jobs = [_with_submit(job, offset(submit)) for submit, job in raw]
    jobs.sort(key=lambda job: (job.submit_time, job.id))
    end = offset(window.end) if window.end is not None else None
    return Trace(
        jobs=tuple(jobs), source=str(path), format=fmt, origin=origin, nodes=nodes, skipped=skipped, end=end
    )


def _with_submit(job: TraceJob, submit: float) -> TraceJob:
    """Copy ``job`` with a new submit time (TraceJob is frozen)."""
    return TraceJob(
        job.id,
        submit,
        job.duration,
        job.gpus,
        job.team,
        job.user,
        job.gpu_models,
        job.kind,
        job.priority_class,
        job.time_limit_s,
        job.gpu_fraction,
        job.cpus,
        job.memory_mb,
        job.name,
    )


def load_philly(path: str | Path, window: Window = Window()) -> Trace:
    """Load the Pollux-processed Philly CSV (timestamp,duration,num_gpus,gpu_time,cluster).

    Teams are the virtual clusters (``cluster``); job ids are the 1-based data row numbers, stable
    across windows. Jobs with zero GPUs or zero duration are skipped and counted.
    """
    path = Path(path)
    _check_window_kind(window, True, path)
    raw: list[tuple[Bound, TraceJob]] = []
    skipped: dict[str, int] = {}
    for line, row in _rows(path, ("timestamp", "duration", "num_gpus", "cluster")):
        cell = _Cell(path, line, row)
        submit = cell.timestamp("timestamp")
        duration = cell.number("duration")
        gpus = cell.integer("num_gpus")
        team = cell.text("cluster")
        if not team:
            raise cell.fail("cluster", "a virtual-cluster id")
        if not window.contains(submit):
            continue
        if gpus == 0 or duration == 0:
            key = "cpu-only" if gpus == 0 else "zero-duration"
            skipped[key] = skipped.get(key, 0) + 1
            continue
        raw.append(
            (
                submit,
                TraceJob(
                    id=line - 1,
                    submit_time=0.0,
                    duration=duration,
                    gpus=gpus,
                    team=team,
                    name=f"philly-{line - 1}",
                ),
            )
        )
    return _finish(raw, window, path, "philly", skipped)


def load_generic(path: str | Path, window: Window = Window()) -> Trace:
    """Load Rota's generic CSV: ``job_id,submit_time,duration,num_gpus`` (seconds) and optional
    ``team,user,gpu_model,kind,priority_class,time_limit,gpu_fraction``.

    submit_time is seconds, or an ISO datetime in every row. gpu_model lists acceptable models separated
    by ``|``. gpu_fraction in (0, 1] asks for part of one GPU (num_gpus must then be 1). Jobs with 0 GPUs
    are skipped and counted.
    """
    path = Path(path)
    raw: list[tuple[Bound, TraceJob]] = []
    skipped: dict[str, int] = {}
    seen: dict[str, int] = {}
    dated: bool | None = None
    for index, (line, row) in enumerate(_rows(path, ("job_id", "submit_time", "duration", "num_gpus"))):
        cell = _Cell(path, line, row)
        name = cell.text("job_id")
        if not name:
            raise cell.fail("job_id", "a job id")
        if name in seen:
            raise TraceError(
                f"{path}:{line}: column 'job_id': duplicate id {name!r} (first on line {seen[name]})"
            )
        seen[name] = line
        submit_text = cell.text("submit_time")
        is_date = bool(submit_text) and ("-" in submit_text[1:] or ":" in submit_text)
        if dated is None:
            dated = is_date
            _check_window_kind(window, dated, path)
        elif dated != is_date:
            raise cell.fail("submit_time", "a date and time like the rows above" if dated else "seconds")
        submit: Bound = cell.timestamp("submit_time") if dated else cell.number("submit_time")
        duration = cell.number("duration", positive=True)
        gpus = cell.integer("num_gpus")
        fraction = cell.optional_number("gpu_fraction")
        if fraction is not None:
            if fraction > 1:
                raise cell.fail("gpu_fraction", "a fraction in (0, 1]")
            if gpus != 1:
                raise TraceError(f"{path}:{line}: column 'num_gpus': must be 1 when gpu_fraction is set")
            if fraction == 1:
                fraction = None
        time_limit = cell.optional_number("time_limit")
        kind = cell.text("kind", "training")
        if kind not in KIND_DEFAULT_CLASS:
            raise cell.fail("kind", f"one of {', '.join(KIND_DEFAULT_CLASS)}")
        if not window.contains(submit):
            continue
        if gpus == 0:
            skipped["cpu-only"] = skipped.get("cpu-only", 0) + 1
            continue
        models = tuple(m.strip().lower() for m in cell.text("gpu_model").split("|") if m.strip())
        raw.append(
            (
                submit,
                TraceJob(
                    id=index + 1,
                    submit_time=0.0,
                    duration=duration,
                    gpus=gpus,
                    team=cell.text("team", "default"),
                    user=cell.text("user"),
                    gpu_models=models,
                    kind=kind,
                    priority_class=cell.text("priority_class", KIND_DEFAULT_CLASS[kind]),
                    time_limit_s=time_limit,
                    gpu_fraction=fraction,
                    name=name,
                ),
            )
        )
    return _finish(raw, window, path, "generic", skipped)


def load_openb_nodes(path: str | Path) -> tuple[TraceNode, ...]:
    """Load an openb node list (sn,cpu_milli,memory_mib,gpu,model); nodes without GPUs are left out."""
    path = Path(path)
    nodes = []
    for line, row in _rows(path, ("sn", "cpu_milli", "memory_mib", "gpu", "model")):
        cell = _Cell(path, line, row)
        gpus = cell.integer("gpu")
        if gpus == 0:
            continue
        model = cell.text("model").lower()
        if not model:
            raise cell.fail("model", "a GPU model")
        nodes.append(
            TraceNode(
                name=cell.text("sn") or f"node-{line}",
                gpus=gpus,
                model=model,
                cpus=cell.integer("cpu_milli") // 1000,
                memory_mb=cell.integer("memory_mib"),
            )
        )
    return tuple(nodes)


def load_openb(
    path: str | Path, window: Window = Window(), nodes_path: str | Path | None = None, team: str = "default"
) -> Trace:
    """Load an Alibaba openb pod list; the cluster comes from the node list next to it.

    Pods without GPUs are skipped. ``gpu_milli`` < 1000 on a 1-GPU pod becomes ``gpu_fraction``;
    ``gpu_spec`` (``|``-separated) becomes the acceptable GPU models; QoS picks the kind and priority
    class. Files without time columns (the gpushare/multigpu variants) are packing experiments: pods
    arrive one second apart in file order and never finish. With times, a pod runs from creation for
    ``deletion - scheduled`` seconds (``deletion - creation`` when it was never scheduled).
    """
    path = Path(path)
    if nodes_path is None:
        nodes_path = path.with_name("openb_node_list_gpu_node.csv")
    nodes = load_openb_nodes(nodes_path) if Path(nodes_path).exists() else ()
    _check_window_kind(window, False, path)
    raw: list[tuple[Bound, TraceJob]] = []
    skipped: dict[str, int] = {}
    for index, (line, row) in enumerate(
        _rows(path, ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"))
    ):
        cell = _Cell(path, line, row)
        gpus = cell.integer("num_gpu")
        milli = cell.integer("gpu_milli")
        cpus = math.ceil(cell.integer("cpu_milli") / 1000)
        memory = cell.integer("memory_mib")
        if "creation_time" in row:
            submit: float = cell.number("creation_time")
            started = cell.number("scheduled_time") if cell.text("scheduled_time") else submit
            duration = cell.number("deletion_time") - started
        else:
            submit, duration = float(index), 1e12
        if not window.contains(submit):
            continue
        if gpus == 0:
            skipped["cpu-only"] = skipped.get("cpu-only", 0) + 1
            continue
        if duration <= 0:
            skipped["zero-duration"] = skipped.get("zero-duration", 0) + 1
            continue
        if milli <= 0 or milli > 1000:
            raise cell.fail("gpu_milli", "a GPU share in 1..1000")
        fraction = milli / 1000 if gpus == 1 and milli < 1000 else None
        qos = cell.text("qos", "Guaranteed")
        if qos not in OPENB_QOS:
            raise cell.fail("qos", f"one of {', '.join(OPENB_QOS)}")
        kind, priority_class = OPENB_QOS[qos]
        models = tuple(m.strip().lower() for m in cell.text("gpu_spec").split("|") if m.strip())
        raw.append(
            (
                submit,
                TraceJob(
                    id=index + 1,
                    submit_time=0.0,
                    duration=duration,
                    gpus=gpus,
                    team=team,
                    gpu_models=models,
                    kind=kind,
                    priority_class=priority_class,
                    gpu_fraction=fraction,
                    cpus=cpus,
                    memory_mb=memory,
                    name=cell.text("name"),
                ),
            )
        )
    return _finish(raw, window, path, "openb", skipped, nodes)


LOADERS: dict[str, Callable[..., Trace]] = {
    "philly": load_philly,
    "generic": load_generic,
    "openb": load_openb,
}


def load_trace(path: str | Path, fmt: str, window: Window = Window()) -> Trace:
    """Load ``path`` with the loader for ``fmt`` (one of :data:`FORMATS`)."""
    try:
        loader = LOADERS[fmt]
    except KeyError:
        raise ValueError(f"unknown trace format {fmt!r}; allowed: {', '.join(FORMATS)}") from None
    return loader(path, window)
