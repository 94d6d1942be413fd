"""GPU health as the agent reports it in each heartbeat, judged from samples and events.

The rules follow NVIDIA's device plugin and DCGM health checks: application XIDs (errors caused by the
user's program) leave the GPU healthy and are only reported in telemetry; any other XID, an uncorrected
ECC error or a lost GPU marks it unhealthy until the agent restarts (an admin resumes the node once the
GPU is fixed). Over-temperature marks it unhealthy only while it lasts.

A reason names the fault, not the device ("XID 79", "GPU is lost"): the portal knows which GPU the report
is about and words the node's drain reason itself ("XID 79 on GPU 3").
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from scheduler.agent.gpu.base import ECC, LOST, XID, GpuEvent, GpuInfo, GpuSample

APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68})
DEFAULT_MAX_TEMPERATURE_C = 90


@dataclass(slots=True)
class _Health:
    fault: str = ""  # sticky reason (XID, ECC, lost)
    hot: str = ""  # transient reason (temperature)


class HealthTracker:
    """Keeps the health of each schedulable device; feed it samples and events, read ``report()``."""

    def __init__(self, devices: Iterable[GpuInfo], *, max_temperature_c: int = DEFAULT_MAX_TEMPERATURE_C):
        """Start with every device healthy."""
        self.max_temperature_c = max_temperature_c
        self._health: dict[str, _Health] = {}
        self.track(devices)

    def track(self, devices: Iterable[GpuInfo]) -> None:
        """Follow exactly these devices (after a new discovery), keeping what is known about them."""
        self._health = {d.uuid: self._health.get(d.uuid) or _Health() for d in devices}

    def observe(self, samples: Iterable[GpuSample], events: Iterable[GpuEvent]) -> dict[str, list[int]]:
        """Update health; returns the XIDs seen per device uuid, for the telemetry batch."""
        xids: dict[str, list[int]] = {}
        for event in events:
            health = self._health.get(event.uuid)
            if health is None:
                continue
            if event.kind == XID and event.code is not None:
                xids.setdefault(event.uuid, []).append(event.code)
                if event.code not in APPLICATION_XIDS:
                    health.fault = health.fault or f"XID {event.code}"
            elif event.kind == ECC:
                health.fault = health.fault or "uncorrected ECC error"
            elif event.kind == LOST:
                health.fault = health.fault or "GPU is lost"
        for sample in samples:
            health = self._health.get(sample.uuid)
            if health is None:
                continue
            if sample.lost:
                health.fault = health.fault or "GPU is lost"
            if sample.ecc_uncorrected:
                health.fault = health.fault or f"{sample.ecc_uncorrected} uncorrected ECC errors"
            temperature = sample.temperature_c
            health.hot = (
                f"temperature {temperature} C over the {self.max_temperature_c} C limit"
                if temperature is not None and temperature >= self.max_temperature_c
                else ""
            )
        return xids

    def report(self) -> list[dict[str, object]]:
        """The heartbeat's ``gpus`` list: ``{"uuid", "healthy", "reason"}`` per device."""
        return [
            {"uuid": uuid, "healthy": not (h.fault or h.hot), "reason": h.fault or h.hot}
            for uuid, h in self._health.items()
        ]
