"""The GPU backend interface and the plain records it returns.

Every backend converts units once, here at the boundary: memory in MiB, utilization in percent,
temperature in degrees Celsius, power in watts, clocks in MHz. A metric the device does not support is
``None`` ("n/a"), never an error.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

# Event kinds reported by ``GpuBackend.events``.
XID = "xid"
ECC = "ecc"
LOST = "lost"


def utc_now() -> dt.datetime:
    """The current time as an aware UTC datetime."""
    return dt.datetime.now(dt.UTC)


@dataclass(frozen=True, slots=True)
class SystemInfo:
    """What the node says about itself at registration (driver, CUDA, CPUs, RAM in MiB)."""

    hostname: str
    driver_version: str
    cuda_version: str
    cpus: int
    memory_mb: int


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """One schedulable device: a whole GPU, or one MIG slice (then ``mig`` is True).

    ``index`` is unique on the node: the GPU's own index for a whole GPU, ``mig_index(parent, slot)`` for
    a MIG slice (``physical_index`` is then the parent's index). ``uuid`` is ``GPU-…`` or ``MIG-…``;
    ``model`` is Rota's GPU-model slug, e.g. ``h100-80gb`` or ``a100-1g.10gb``; ``name`` is the name the
    driver reports.
    """

    index: int
    uuid: str
    name: str
    model: str
    memory_mb: int
    mig: bool = False
    parent_uuid: str | None = None
    mig_profile: str | None = None
    physical_index: int = -1

    def __post_init__(self) -> None:
        if self.physical_index < 0:
            object.__setattr__(self, "physical_index", self.index)


def mig_index(parent: int, slot: int) -> int:
    """The schedulable index of MIG slice ``slot`` of GPU ``parent``: 100 + 10 x parent + slot.

    The portal keys a node's devices by index, so slices need indexes of their own; this one reads back
    as "slice 2 of GPU 3" (132) and stays below the portal's limit of 1023 for up to 90 GPUs.
    """
    return 100 + 10 * parent + slot


@dataclass(frozen=True, slots=True)
class ProcessUsage:
    """A process holding GPU memory (MiB; None when the driver cannot tell)."""

    pid: int
    used_mb: int | None


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One telemetry reading of one schedulable device. ``lost`` is True when the GPU fell off the bus."""

    uuid: str
    index: int
    at: dt.datetime
    util_pct: float | None = None
    mem_used_mb: int | None = None
    temperature_c: int | None = None
    power_w: float | None = None
    sm_clock_mhz: int | None = None
    ecc_uncorrected: int | None = None
    lost: bool = False
    processes: tuple[ProcessUsage, ...] = field(default_factory=tuple)


@dataclass(frozen=True, slots=True)
class GpuEvent:
    """Something that happened to a device since the last ``events()`` call.

    ``kind`` is ``xid`` (``code`` is the XID number), ``ecc`` (``code`` is the new uncorrected count)
    or ``lost``. ``uuid`` names the schedulable device; an event on a MIG-partitioned GPU is reported once
    per slice of it.
    """

    uuid: str
    index: int
    kind: str
    at: dt.datetime
    code: int | None = None
    message: str = ""


class GpuBackend(Protocol):
    """What the agent needs from a GPU layer. Implementations: ``NvmlBackend``, ``FakeBackend``."""

    kind: str  # "nvml" or "fake", sent at registration

    def system_info(self) -> SystemInfo:
        """Driver/CUDA versions, CPUs and memory of the node."""
        ...

    def discover(self) -> list[GpuInfo]:
        """The schedulable devices, in index order (MIG slices replace their parent)."""
        ...

    def sample(self) -> list[GpuSample]:
        """One reading per schedulable device."""
        ...

    def events(self) -> list[GpuEvent]:
        """XID, ECC and lost-GPU events since the previous call; never blocks."""
        ...

    def set_busy(self, busy: Mapping[str, int]) -> None:
        """Tell the backend which devices run a job (uuid -> leader pid). Only the fake uses it."""
        ...

    def close(self) -> None:
        """Release the library handles."""
        ...
