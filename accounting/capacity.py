"""GPU capacity over time: which GPUs were in the inventory when. Pure (no Django, no clock).

The inventory (``Gpu.present``) says only what is there now, so the usage rollup records each GPU's stretches in
it (``accounting.models.GpuPresence``): from the node registration that added the GPU to the registration that
found it gone (or the moment its row went away). Idle cost and entitlements count each GPU over those stretches
only, never before it existed and never past now.

* ``reconcile`` is the bookkeeping: given the open stretches and the inventory now, which to close (and when)
  and which to open (and since when).
* ``capacity_steps`` turns stretches into a step function: the GPUs of each model present over each part of a
  range, the part boundaries being the moments a GPU came or went.
* ``integrate`` reads GPU-seconds (and the most GPUs present at once) per model off those steps for any span.
"""

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from accounting.slicing import to_us

Step = tuple[datetime, datetime, dict[str, int]]  # [from, to): GPUs present per GPU model
_MICRO = Decimal(10**6)


@dataclass(frozen=True, slots=True)
class Presence:
    """One stretch a GPU of ``gpu_model`` was in the inventory: ``[since, until)``, ``until`` None while it is."""

    gpu_model: str
    since: datetime
    until: datetime | None = None


@dataclass(frozen=True, slots=True)
class OpenPresence:
    """A recorded stretch not yet closed: its row id, the GPU row (None once that row is deleted), its model."""

    id: int
    gpu_id: int | None
    gpu_model_id: int
    since: datetime


@dataclass(frozen=True, slots=True)
class InventoryGpu:
    """A GPU row as the inventory has it now. ``registered_at`` is its node's latest registration: the moment
    the GPU last appeared, changed model or went missing (registration is the only writer of those)."""

    id: int
    gpu_model_id: int
    present: bool
    registered_at: datetime | None


@dataclass(frozen=True, slots=True)
class Reconciled:
    """What to record: stretches to close ``{row id: until}`` and GPUs to open ``{GPU id: (model id, since)}``."""

    close: dict[int, datetime]
    open: dict[int, tuple[int, datetime]]


def reconcile(
    open_rows: Iterable[OpenPresence],
    inventory: Iterable[InventoryGpu],
    *,
    now: datetime,
    first_seen: Mapping[int, datetime] | None = None,
) -> Reconciled:
    """Bring the recorded stretches in line with the inventory at ``now``.

    A stretch closes when its GPU is gone (not present), changed model (a replaced card keeps the row), or its
    row was deleted: at the node's latest registration (the one that saw the change), else ``now``; never before
    it began. A present GPU without an open stretch of its model gets one since the node's latest registration
    (the one that added it), or since ``first_seen`` (e.g. its first allocation) when that is earlier (a GPU
    never recorded before: the history began after it arrived), else since ``now``."""
    gpus = {g.id: g for g in inventory}
    close: dict[int, datetime] = {}
    covered: set[int] = set()
    for row in open_rows:
        gpu = gpus.get(row.gpu_id) if row.gpu_id is not None else None
        if gpu is not None and gpu.present and gpu.gpu_model_id == row.gpu_model_id and row.gpu_id not in covered:
            covered.add(gpu.id)
            continue
        seen = gpu.registered_at if gpu is not None and gpu.registered_at is not None else now
        close[row.id] = max(row.since, min(seen, now))
    first_seen = first_seen or {}
    opened: dict[int, tuple[int, datetime]] = {}
    for gpu in gpus.values():
        if not gpu.present or gpu.id in covered:
            continue
        since = min(gpu.registered_at or now, now)
        if gpu.id in first_seen:
            since = min(since, first_seen[gpu.id])
        opened[gpu.id] = (gpu.gpu_model_id, since)
    return Reconciled(close, opened)


def capacity_steps(presences: Iterable[Presence], start: datetime, end: datetime) -> list[Step]:
    """The GPUs per model present over ``[start, end)`` as consecutive steps covering the whole range (an empty
    mapping where none was), each step as long as nothing came or went. Open stretches run to ``end``."""
    if end <= start:
        return []
    events: dict[datetime, Counter] = defaultdict(Counter)
    for p in presences:
        lo, hi = max(p.since, start), min(p.until or end, end)
        if hi > lo:
            events[lo][p.gpu_model] += 1
            events[hi][p.gpu_model] -= 1
    moments = sorted({start, end, *events})
    counts: Counter = Counter()
    out: list[Step] = []
    for a, b in zip(moments, moments[1:], strict=False):
        counts.update(events.get(a, {}))
        now = {m: n for m, n in sorted(counts.items()) if n > 0}
        if out and out[-1][2] == now:
            out[-1] = (out[-1][0], b, now)
        else:
            out.append((a, b, now))
    return out


def integrate(steps: Sequence[Step], lo: datetime, hi: datetime) -> dict[str, tuple[Decimal, int]]:
    """Per GPU model, ``(GPU-seconds, most GPUs present at once)`` over ``[lo, hi)`` from ordered ``steps``
    (exact: whole microseconds). Finds the first step by bisection, so reading consecutive periods costs about
    one pass over the steps."""
    out: dict[str, list] = {}
    i = _first_step(steps, lo)
    while i < len(steps) and steps[i][0] < hi:
        a, b, gpus = steps[i]
        us = to_us(min(b, hi) - max(a, lo))
        if us > 0:
            for model, n in gpus.items():
                cell = out.setdefault(model, [0, 0])
                cell[0] += n * us
                cell[1] = max(cell[1], n)
        i += 1
    return {m: (Decimal(us) / _MICRO, n) for m, (us, n) in out.items()}


def _first_step(steps: Sequence[Step], lo: datetime) -> int:
    """Index of the first step ending after ``lo`` (steps are consecutive, so their ends are ordered)."""
    left, right = 0, len(steps)
    while left < right:
        mid = (left + right) // 2
        if steps[mid][1] <= lo:
            left = mid + 1
        else:
            right = mid
    return left
