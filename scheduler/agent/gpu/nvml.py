"""The real GPU backend, on NVIDIA's NVML through ``pynvml`` (package ``nvidia-ml-py``).

The ``pynvml`` module is a dependency passed in (tests hand in a small stand-in), so this file never
decides by itself which library it talks to. NVML errors are sorted by their code: "not supported" and
friends become ``None`` ("n/a"); "GPU is lost" marks the device lost and emits one ``lost`` event.
"""

from __future__ import annotations

import importlib
import logging
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

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
from scheduler.agent.gpu.models import mig_profile_of, model_slug

log = logging.getLogger(__name__)
MIB = 1024 * 1024
T = TypeVar("T")


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used here: no library, no driver or no permission."""


class _GpuLost(Exception):
    """Internal: the GPU behind a handle is lost."""


@dataclass(slots=True)
class _Physical:
    """One physical GPU: its handle, its schedulable devices (itself or its MIG slices), its state."""

    index: int
    uuid: str
    name: str
    handle: Any
    devices: list[tuple[GpuInfo, Any, int | None]] = field(default_factory=list)  # info, handle, GI id
    lost: bool = False
    ecc_seen: int | None = None


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def cuda_version_text(version: int) -> str:
    """NVML's integer CUDA driver version (12040) as ``"12.4"``."""
    return f"{version // 1000}.{(version % 1000) // 10}"


class NvmlBackend:
    """GPU identity, telemetry and health from NVML."""

    kind = "nvml"

    def __init__(self, nvml: Any = None, *, hostname: str | None = None) -> None:
        """Initialise NVML; raises ``NvmlUnavailable`` when the library or driver is missing."""
        try:
            self._nvml = nvml if nvml is not None else importlib.import_module("pynvml")
            self._nvml.nvmlInit()
        except ImportError as error:
            raise NvmlUnavailable(f"pynvml is not installed: {error}") from error
        except Exception as error:  # pynvml.NVMLError_LibraryNotFound, DriverNotLoaded, ...
            raise NvmlUnavailable(f"NVML cannot start: {error}") from error
        self._hostname = hostname or socket.gethostname()
        self._physical: list[_Physical] = []
        self._event_set: Any = None
        self._events: list[GpuEvent] = []

    # error handling ---------------------------------------------------------------------------------

    def _is(self, error: BaseException, name: str) -> bool:
        return getattr(error, "value", None) == getattr(self._nvml, name, object())

    def _call(self, fn: Callable[..., T], *args: Any) -> T | None:
        """Call an NVML query; None when the device cannot answer it, ``_GpuLost`` when it is gone."""
        try:
            return fn(*args)
        except self._nvml.NVMLError as error:
            if self._is(error, "NVML_ERROR_GPU_IS_LOST"):
                raise _GpuLost from error
            if not self._is(error, "NVML_ERROR_NOT_SUPPORTED"):
                log.debug("NVML %s failed: %s", getattr(fn, "__name__", fn), error)
            return None

    # identity ---------------------------------------------------------------------------------------

    def system_info(self) -> SystemInfo:
        """Driver and CUDA versions from NVML; CPUs and memory from the operating system."""
        nv = self._nvml
        driver = self._call(nv.nvmlSystemGetDriverVersion)
        cuda = self._call(nv.nvmlSystemGetCudaDriverVersion)
        pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        return SystemInfo(
            hostname=self._hostname,
            driver_version=_text(driver) if driver else "",
            cuda_version=cuda_version_text(cuda) if cuda else "",
            cpus=os.cpu_count() or 0,
            memory_mb=pages * page_size // MIB,
        )

    def discover(self) -> list[GpuInfo]:
        """Enumerate GPUs; a GPU in MIG mode contributes its slices instead of itself.

        A GPU that is lost or unreadable during discovery is left out (the portal then sees the node
        with fewer GPUs than before).
        """
        nv = self._nvml
        self._physical = []
        for index in range(nv.nvmlDeviceGetCount()):
            try:
                self._physical.append(self._discover_one(index))
            except (_GpuLost, nv.NVMLError) as error:
                log.error("GPU %d cannot be read and is left out: %r", index, error)
        self._register_events()
        return [info for gpu in self._physical for info, _, _ in gpu.devices]

    def _discover_one(self, index: int) -> _Physical:
        nv = self._nvml
        handle = nv.nvmlDeviceGetHandleByIndex(index)
        gpu = _Physical(
            index, _text(nv.nvmlDeviceGetUUID(handle)), _text(nv.nvmlDeviceGetName(handle)), handle
        )
        mode = self._call(nv.nvmlDeviceGetMigMode, handle)
        if mode and mode[0] == getattr(nv, "NVML_DEVICE_MIG_ENABLE", 1):
            for slot in range(self._call(nv.nvmlDeviceGetMaxMigDeviceCount, handle) or 0):
                mig = self._call(nv.nvmlDeviceGetMigDeviceHandleByIndex, handle, slot)
                if mig is not None:
                    gpu.devices.append(self._mig_device(gpu, mig, slot))
            return gpu
        memory_mb = int(nv.nvmlDeviceGetMemoryInfo(handle).total // MIB)
        info = GpuInfo(index, gpu.uuid, gpu.name, model_slug(gpu.name, memory_mb), memory_mb)
        gpu.devices.append((info, handle, None))
        return gpu

    def _mig_device(self, gpu: _Physical, handle: Any, slot: int) -> tuple[GpuInfo, Any, int | None]:
        nv = self._nvml
        name = _text(nv.nvmlDeviceGetName(handle))
        memory_mb = int(nv.nvmlDeviceGetMemoryInfo(handle).total // MIB)
        info = GpuInfo(
            index=mig_index(gpu.index, slot),
            physical_index=gpu.index,
            uuid=_text(nv.nvmlDeviceGetUUID(handle)),
            name=name,
            model=model_slug(name, memory_mb, parent_name=gpu.name),
            memory_mb=memory_mb,
            mig=True,
            parent_uuid=gpu.uuid,
            mig_profile=mig_profile_of(name),
        )
        instance = getattr(nv, "nvmlDeviceGetGpuInstanceId", None)
        return info, handle, self._call(instance, handle) if instance else None

    def _register_events(self) -> None:
        """Subscribe to XID and double-bit ECC events on every GPU that supports them (once)."""
        nv = self._nvml
        if self._event_set is not None:
            return
        wanted = nv.nvmlEventTypeXidCriticalError | nv.nvmlEventTypeDoubleBitEccError
        try:
            self._event_set = nv.nvmlEventSetCreate()
        except nv.NVMLError as error:
            log.warning("NVML events unavailable, XIDs will not be seen: %s", error)
            return
        for gpu in self._physical:
            try:
                supported = self._call(nv.nvmlDeviceGetSupportedEventTypes, gpu.handle)
                mask = wanted & supported if supported is not None else wanted
                if mask:
                    nv.nvmlDeviceRegisterEvents(gpu.handle, mask, self._event_set)
            except (_GpuLost, nv.NVMLError) as error:
                log.warning("GPU %d: cannot subscribe to events: %r", gpu.index, error)

    # telemetry --------------------------------------------------------------------------------------

    def set_busy(self, busy: Mapping[str, int]) -> None:
        """NVML measures real load; nothing to do."""

    def sample(self) -> list[GpuSample]:
        """Read every schedulable device once; a GPU found lost reads as ``lost`` from then on."""
        now = utc_now()
        samples: list[GpuSample] = []
        for gpu in self._physical:
            if not gpu.lost:
                try:
                    samples.extend(self._sample_gpu(gpu, now))
                    continue
                except _GpuLost:
                    self._mark_lost(gpu)
            samples.extend(GpuSample(info.uuid, info.index, now, lost=True) for info, _, _ in gpu.devices)
        return samples

    def _sample_gpu(self, gpu: _Physical, now: Any) -> list[GpuSample]:
        nv, call = self._nvml, self._call
        temperature = call(nv.nvmlDeviceGetTemperature, gpu.handle, nv.NVML_TEMPERATURE_GPU)
        power_mw = call(nv.nvmlDeviceGetPowerUsage, gpu.handle)
        clock = call(nv.nvmlDeviceGetClockInfo, gpu.handle, nv.NVML_CLOCK_SM)
        ecc = call(
            nv.nvmlDeviceGetTotalEccErrors,
            gpu.handle,
            nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            nv.NVML_VOLATILE_ECC,
        )
        if ecc is not None and gpu.ecc_seen is not None and ecc > gpu.ecc_seen:
            self._emit(gpu, ECC, int(ecc))
        gpu.ecc_seen = ecc if ecc is not None else gpu.ecc_seen
        samples = []
        for info, handle, _ in gpu.devices:
            rates = call(nv.nvmlDeviceGetUtilizationRates, handle)
            memory = call(nv.nvmlDeviceGetMemoryInfo, handle)
            processes = call(nv.nvmlDeviceGetComputeRunningProcesses, handle) or []
            samples.append(
                GpuSample(
                    uuid=info.uuid,
                    index=info.index,
                    at=now,
                    util_pct=float(rates.gpu) if rates is not None else None,
                    mem_used_mb=int(memory.used // MIB) if memory is not None else None,
                    temperature_c=int(temperature) if temperature is not None else None,
                    power_w=round(power_mw / 1000, 1) if power_mw is not None else None,
                    sm_clock_mhz=int(clock) if clock is not None else None,
                    ecc_uncorrected=int(ecc) if ecc is not None else None,
                    processes=tuple(
                        ProcessUsage(
                            int(p.pid), int(p.usedGpuMemory // MIB) if p.usedGpuMemory is not None else None
                        )
                        for p in processes
                    ),
                )
            )
        return samples

    # health events ----------------------------------------------------------------------------------

    def _emit(self, gpu: _Physical, kind: str, code: int | None, instance: int | None = None) -> None:
        """Queue an event for the slices it concerns (the one GPU instance, else all of the GPU)."""
        now = utc_now()
        targets = [info for info, _, gi in gpu.devices if instance is not None and gi == instance]
        for info in targets or [info for info, _, _ in gpu.devices]:
            self._events.append(GpuEvent(info.uuid, info.index, kind, now, code))

    def _mark_lost(self, gpu: _Physical) -> None:
        if not gpu.lost:
            gpu.lost = True
            log.error("GPU %d (%s) is lost", gpu.index, gpu.uuid)
            self._emit(gpu, LOST, None)

    def events(self) -> list[GpuEvent]:
        """Drain the NVML event set without waiting, plus lost/ECC events found while sampling."""
        nv = self._nvml
        while self._event_set is not None:
            try:
                data = nv.nvmlEventSetWait(self._event_set, 0)
            except nv.NVMLError as error:
                if not self._is(error, "NVML_ERROR_TIMEOUT"):
                    log.warning("NVML event wait failed: %s", error)
                break
            self._record_event(data)
        events, self._events = self._events, []
        return events

    def _record_event(self, data: Any) -> None:
        nv = self._nvml
        try:
            uuid = _text(nv.nvmlDeviceGetUUID(data.device))
        except nv.NVMLError:
            uuid = ""
        gpu = next((g for g in self._physical if g.uuid == uuid), None)
        if gpu is None:
            log.warning("NVML event 0x%x for an unknown device %r", data.eventType, uuid)
            return
        instance = getattr(data, "gpuInstanceId", None)
        if data.eventType & nv.nvmlEventTypeXidCriticalError:
            self._emit(gpu, XID, int(data.eventData), instance)
        elif data.eventType & nv.nvmlEventTypeDoubleBitEccError:
            self._emit(gpu, ECC, None, instance)

    def close(self) -> None:
        """Free the event set and shut NVML down; errors here are only logged."""
        nv = self._nvml
        try:
            if self._event_set is not None:
                nv.nvmlEventSetFree(self._event_set)
                self._event_set = None
            nv.nvmlShutdown()
        except nv.NVMLError as error:
            log.debug("NVML shutdown: %s", error)
