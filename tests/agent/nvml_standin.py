"""A stand-in for the ``pynvml`` module: the same function and constant names, over a few fake devices.

It is the only stand-in the agent's tests use (the GPU layer); ``test_nvml_backend`` checks that every
name it offers exists in the real ``pynvml`` too, so the backend cannot drift from the real API.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_GPU_IS_LOST = 15


class NVMLError(Exception):
    """Like pynvml's: carries the NVML return code in ``value``."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value


class NVMLError_NotSupported(NVMLError):  # noqa: N801 (pynvml's names)
    def __init__(self) -> None:
        super().__init__(NVML_ERROR_NOT_SUPPORTED)


class NVMLError_GpuIsLost(NVMLError):  # noqa: N801
    def __init__(self) -> None:
        super().__init__(NVML_ERROR_GPU_IS_LOST)


class NVMLError_Timeout(NVMLError):  # noqa: N801
    def __init__(self) -> None:
        super().__init__(NVML_ERROR_TIMEOUT)


@dataclass
class Device:
    """One fake device; ``unsupported`` names NVML functions that answer NotSupported for it."""

    uuid: str
    name: str
    total_bytes: int
    used_bytes: int = 0
    util: int = 0
    temperature: int = 40
    power_mw: int = 100_000
    sm_clock: int = 1980
    ecc: int = 0
    lost: bool = False
    mig_slices: list[Device] = field(default_factory=list)
    gpu_instance: int | None = None
    processes: list[tuple[int, int | None]] = field(default_factory=list)
    unsupported: set[str] = field(default_factory=set)


class StandInNvml:
    """Module-like object: pass it as ``NvmlBackend(nvml=...)``."""

    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_GpuIsLost = NVMLError_GpuIsLost
    NVMLError_Timeout = NVMLError_Timeout
    NVML_ERROR_NOT_SUPPORTED = NVML_ERROR_NOT_SUPPORTED
    NVML_ERROR_TIMEOUT = NVML_ERROR_TIMEOUT
    NVML_ERROR_GPU_IS_LOST = NVML_ERROR_GPU_IS_LOST
    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    NVML_DEVICE_MIG_ENABLE = 1
    nvmlEventTypeDoubleBitEccError = 0x2
    nvmlEventTypeXidCriticalError = 0x8

    def __init__(self, devices: list[Device]) -> None:
        self.devices = devices
        self.pending_events: list[SimpleNamespace] = []
        self.registered: list[tuple[str, int]] = []
        self.shut_down = False

    def _check(self, device: Device, function: str) -> Device:
        if device.lost:
            raise NVMLError_GpuIsLost()
        if function in device.unsupported:
            raise NVMLError_NotSupported()
        return device

    def xid(self, device: Device, code: int, gpu_instance: int = 0xFFFFFFFF) -> None:
        """Queue an XID event as the driver would."""
        self.pending_events.append(
            SimpleNamespace(device=device, eventType=0x8, eventData=code, gpuInstanceId=gpu_instance)
        )

    # the pynvml functions the backend uses --------------------------------------------------------

    def nvmlInit(self) -> None:  # noqa: N802
        pass

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.shut_down = True

    def nvmlSystemGetDriverVersion(self) -> str:  # noqa: N802
        return "550.54.15"

    def nvmlSystemGetCudaDriverVersion(self) -> int:  # noqa: N802
        return 12040

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Device:  # noqa: N802
        return self._check(self.devices[index], "nvmlDeviceGetHandleByIndex")

    def nvmlDeviceGetUUID(self, device: Device) -> str:  # noqa: N802
        return self._check(device, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetName(self, device: Device) -> bytes:  # noqa: N802
        return self._check(device, "nvmlDeviceGetName").name.encode()  # older pynvml returns bytes

    def nvmlDeviceGetMemoryInfo(self, device: Device) -> Any:  # noqa: N802
        d = self._check(device, "nvmlDeviceGetMemoryInfo")
        return SimpleNamespace(total=d.total_bytes, used=d.used_bytes, free=d.total_bytes - d.used_bytes)

    def nvmlDeviceGetMigMode(self, device: Device) -> list[int]:  # noqa: N802
        d = self._check(device, "nvmlDeviceGetMigMode")
        return [1, 1] if d.mig_slices else [0, 0]

    def nvmlDeviceGetMaxMigDeviceCount(self, device: Device) -> int:  # noqa: N802
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: Device, index: int) -> Device:  # noqa: N802
        if index >= len(device.mig_slices):
            raise NVMLError(6)  # NVML_ERROR_NOT_FOUND: an empty slot
        return device.mig_slices[index]

    def nvmlDeviceGetGpuInstanceId(self, device: Device) -> int | None:  # noqa: N802
        return device.gpu_instance

    def nvmlDeviceGetUtilizationRates(self, device: Device) -> Any:  # noqa: N802
        return SimpleNamespace(gpu=self._check(device, "nvmlDeviceGetUtilizationRates").util, memory=0)

    def nvmlDeviceGetTemperature(self, device: Device, sensor: int) -> int:  # noqa: N802
        return self._check(device, "nvmlDeviceGetTemperature").temperature

    def nvmlDeviceGetPowerUsage(self, device: Device) -> int:  # noqa: N802
        return self._check(device, "nvmlDeviceGetPowerUsage").power_mw

    def nvmlDeviceGetClockInfo(self, device: Device, clock: int) -> int:  # noqa: N802
        return self._check(device, "nvmlDeviceGetClockInfo").sm_clock

    def nvmlDeviceGetTotalEccErrors(self, device: Device, error_type: int, counter: int) -> int:  # noqa: N802
        return self._check(device, "nvmlDeviceGetTotalEccErrors").ecc

    def nvmlDeviceGetComputeRunningProcesses(self, device: Device) -> list[Any]:  # noqa: N802
        d = self._check(device, "nvmlDeviceGetComputeRunningProcesses")
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in d.processes]

    def nvmlDeviceGetSupportedEventTypes(self, device: Device) -> int:  # noqa: N802
        return 0x8 | 0x2

    def nvmlEventSetCreate(self) -> str:  # noqa: N802
        return "event-set"

    def nvmlDeviceRegisterEvents(self, device: Device, mask: int, event_set: str) -> None:  # noqa: N802
        self._check(device, "nvmlDeviceRegisterEvents")
        self.registered.append((device.uuid, mask))

    def nvmlEventSetWait(self, event_set: str, timeout_ms: int) -> Any:  # noqa: N802
        assert timeout_ms == 0, "the agent must never block on NVML events"
        if not self.pending_events:
            raise NVMLError_Timeout()
        return self.pending_events.pop(0)

    def nvmlEventSetFree(self, event_set: str) -> None:  # noqa: N802
        pass
