"""A GPU backend that pretends, driven by a profile (see ``profile.py``).

Its utilization follows the jobs the agent says are running on each device (``set_busy``), and it can
be made to fail: scripted faults fire at a time after start, and lines appended to the profile's
``fault_file`` fire as soon as the backend next polls it, so a demo or a test can inject an XID at runtime.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from scheduler.agent.gpu.base import (
    ECC,
    LOST,
    XID,
    GpuEvent,
    GpuInfo,
    GpuSample,
    ProcessUsage,
    SystemInfo,
    mig_index,
    utc_now,
)
from scheduler.agent.gpu.models import model_slug
from scheduler.agent.gpu.profile import (
    FakeGpu,
    Fault,
    Profile,
    ProfileError,
    mig_slice_memory_mb,
    parse_fault,
)

log = logging.getLogger(__name__)
_UUID_NAMESPACE = uuid.UUID("5b0b8f8e-3c4e-4c0a-9a53-6f0d2f6a1c01")
IDLE_TEMPERATURE_C = 34
BUSY_TEMPERATURE_C = 66


@dataclass(slots=True)
class _GpuState:
    """Mutable condition of one physical fake GPU."""

    ecc_uncorrected: int = 0
    lost: bool = False
    temperature_c: int | None = None  # forced by a fault
    devices: list[GpuInfo] = field(default_factory=list)


class FakeBackend:
    """A profile-driven stand-in for NVML. Deterministic for a given clock."""

    kind = "fake"

    def __init__(
        self,
        profile: Profile,
        *,
        clock: Callable[[], float] = time.monotonic,
        fault_file: str | None = None,
        node: str | None = None,
    ) -> None:
        """Build the fake node; ``clock`` (seconds) drives scripted faults and the utilization wave. ``node``
        names it instead of the profile (``--hostname``): GPU UUIDs follow the name, so two agents on one
        shipped profile are two distinct nodes."""
        self.profile = profile
        self.node = node or profile.node
        self._clock = clock
        self._started = clock()
        self._pending_faults = sorted(profile.faults, key=lambda fault: fault.at_s)
        self._fault_file = fault_file or profile.fault_file
        self._fault_offset = 0
        self._events: list[GpuEvent] = []
        self._busy: dict[str, int] = {}
        self._gpus = {gpu.index: _GpuState(devices=self._devices_of(gpu)) for gpu in profile.gpus}

    def _uuid(self, *parts: object) -> str:
        return str(uuid.uuid5(_UUID_NAMESPACE, "/".join([self.node, *map(str, parts)])))

    def _devices_of(self, gpu: FakeGpu) -> list[GpuInfo]:
        parent_uuid = f"GPU-{self._uuid(gpu.index)}"
        if not gpu.mig:
            return [GpuInfo(gpu.index, parent_uuid, gpu.name, gpu.model, gpu.memory_mb)]
        devices = []
        for position, slice_profile in enumerate(gpu.mig):
            name = f"{gpu.name} MIG {slice_profile}"
            devices.append(
                GpuInfo(
                    index=mig_index(gpu.index, position),
                    physical_index=gpu.index,
                    uuid=f"MIG-{self._uuid(gpu.index, position)}",
                    name=name,
                    model=model_slug(name, mig_slice_memory_mb(slice_profile), parent_name=gpu.name),
                    memory_mb=mig_slice_memory_mb(slice_profile),
                    mig=True,
                    parent_uuid=parent_uuid,
                    mig_profile=slice_profile,
                )
            )
        return devices

    def system_info(self) -> SystemInfo:
        """The node's name (the profile's unless given), versions, CPUs and memory."""
        p = self.profile
        return SystemInfo(self.node, p.driver_version, p.cuda_version, p.cpus, p.memory_mb)

    def discover(self) -> list[GpuInfo]:
        """Every schedulable device of the profile, MIG slices in place of their parent."""
        return [device for state in self._gpus.values() for device in state.devices]

    def set_busy(self, busy: Mapping[str, int]) -> None:
        """Record which devices run a job (uuid -> pid); their utilization rises accordingly."""
        self._busy = dict(busy)

    def sample(self) -> list[GpuSample]:
        """A plausible reading per device: near-full load where a job runs, idle elsewhere."""
        self._apply_due_faults()
        now, elapsed = utc_now(), self._clock() - self._started
        samples = []
        for gpu in self.profile.gpus:
            state = self._gpus[gpu.index]
            for device in state.devices:
                if state.lost:
                    samples.append(GpuSample(device.uuid, device.index, now, lost=True))
                    continue
                samples.append(self._reading(gpu, state, device, now, elapsed))
        return samples

    def _reading(
        self, gpu: FakeGpu, state: _GpuState, device: GpuInfo, now: object, elapsed: float
    ) -> GpuSample:
        pid = self._busy.get(device.uuid)
        wave = (math.sin(elapsed / 7.0 + device.physical_index) + 1) / 2  # 0..1, slow and per-GPU
        share = device.memory_mb / gpu.memory_mb
        if pid is None:
            util, mem, temp = 0.0, 0, IDLE_TEMPERATURE_C
            power, clock, processes = gpu.power_w * 0.1 * share, 210, ()
        else:
            util = round(85.0 + 14.0 * wave, 1)
            mem = int(device.memory_mb * (0.6 + 0.2 * wave))
            temp = BUSY_TEMPERATURE_C + int(8 * wave)
            power, clock = gpu.power_w * (0.65 + 0.3 * wave) * share, gpu.sm_clock_mhz
            processes = (ProcessUsage(pid, mem),)
        return GpuSample(
            uuid=device.uuid,
            index=device.index,
            at=now,  # type: ignore[arg-type]
            util_pct=util,
            mem_used_mb=mem,
            temperature_c=state.temperature_c if state.temperature_c is not None else temp,
            power_w=round(power, 1),
            sm_clock_mhz=clock,
            ecc_uncorrected=state.ecc_uncorrected,
            processes=processes,
        )

    def events(self) -> list[GpuEvent]:
        """Fault events that fired since the previous call."""
        self._apply_due_faults()
        events, self._events = self._events, []
        return events

    def close(self) -> None:
        """Nothing to release."""

    # faults ---------------------------------------------------------------------------------------

    def inject(self, fault: Fault) -> None:
        """Apply a fault now (what scripted faults and the fault file end up calling)."""
        state = self._gpus[fault.gpu]
        now = utc_now()
        if fault.kind == "temperature_c":
            state.temperature_c = fault.value
            return
        if fault.kind == "ecc":
            state.ecc_uncorrected += fault.value
        if fault.kind == "lost":
            state.lost = True
        kind = {"xid": XID, "ecc": ECC, "lost": LOST}[fault.kind]
        code = state.ecc_uncorrected if kind == ECC else (fault.value if kind == XID else None)
        log.info("fake fault on GPU %d: %s %s", fault.gpu, fault.kind, fault.value)
        for device in state.devices:
            self._events.append(GpuEvent(device.uuid, device.index, kind, now, code))

    def _apply_due_faults(self) -> None:
        elapsed = self._clock() - self._started
        while self._pending_faults and self._pending_faults[0].at_s <= elapsed:
            self.inject(self._pending_faults.pop(0))
        for fault in self._read_fault_file():
            self.inject(fault)

    def _read_fault_file(self) -> list[Fault]:
        """New complete lines of the fault file since the last read (a truncated file starts over)."""
        if not self._fault_file:
            return []
        try:
            size = os.path.getsize(self._fault_file)
            if size < self._fault_offset:
                self._fault_offset = 0
            if size == self._fault_offset:
                return []
            with open(self._fault_file, "rb") as handle:
                handle.seek(self._fault_offset)
                chunk = handle.read(size - self._fault_offset)
        except OSError:
            return []
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self._fault_offset += len(complete)
        faults = []
        for line in complete.decode("utf-8", "replace").splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            try:
                data = json.loads(line)
                faults.append(parse_fault(data, gpu_count=len(self._gpus), where="fault_file"))
            except (json.JSONDecodeError, ProfileError) as error:
                log.warning("ignoring fault file line %r: %s", line, error)
        return faults
