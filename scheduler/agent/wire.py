"""Building the JSON bodies of ``docs/node-protocol.md`` from the agent's records. Pure functions."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from scheduler.agent import AGENT_VERSION
from scheduler.agent.gpu.base import GpuInfo, GpuSample, SystemInfo


def iso(moment: dt.datetime) -> str:
    """An aware datetime as the protocol's ISO 8601 UTC string (``2026-01-31T12:00:00.123Z``)."""
    return moment.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def stamp(value: Any) -> dt.datetime | None:
    """An answer's ``as_of`` (ISO 8601 with its offset) as a time; None when absent or not one (an older
    portal sends none: its answers are applied in the order they come)."""
    if not isinstance(value, str):
        return None
    try:
        moment = dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def gpu_entry(gpu: GpuInfo) -> dict[str, Any]:
    """One device in the register body; MIG slices also name their parent GPU and profile."""
    entry: dict[str, Any] = {
        "index": gpu.index,
        "uuid": gpu.uuid,
        "model": gpu.model,
        "name": gpu.name,
        "memory_mb": gpu.memory_mb,
        "mig": gpu.mig,
    }
    if gpu.mig:
        entry["parent_index"] = gpu.physical_index
        entry["parent_uuid"] = gpu.parent_uuid
        entry["mig_profile"] = gpu.mig_profile
    return entry


def register_body(system: SystemInfo, gpus: Iterable[GpuInfo], backend_kind: str) -> dict[str, Any]:
    """The body of ``POST /api/v1/node/register/``."""
    return {
        "hostname": system.hostname,
        "agent_version": AGENT_VERSION,
        "gpu_backend": backend_kind,
        "driver_version": system.driver_version,
        "cuda_version": system.cuda_version,
        "cpus": system.cpus,
        "memory_mb": system.memory_mb,
        "gpus": [gpu_entry(gpu) for gpu in gpus],
    }


def telemetry_entries(samples: Iterable[GpuSample], xids: Mapping[str, list[int]]) -> list[dict[str, Any]]:
    """Telemetry rows for one round of samples; a device with several new XIDs gets one row per XID.

    Extra rows are 1 ms apart: the portal skips a row that is not newer than the last one of its GPU.
    """
    rows = []
    for sample in samples:
        codes = xids.get(sample.uuid) or [None]
        for position, code in enumerate(codes):
            rows.append(_row(sample, code, sample.at + dt.timedelta(milliseconds=position)))
    return rows


def _row(sample: GpuSample, xid: int | None, at: dt.datetime) -> dict[str, Any]:
    return {
        "uuid": sample.uuid,
        "at": iso(at),
        "util_pct": sample.util_pct,
        "mem_used_mb": sample.mem_used_mb,
        "temperature_c": sample.temperature_c,
        "power_w": sample.power_w,
        "sm_clock_mhz": sample.sm_clock_mhz,
        "ecc_uncorrected": sample.ecc_uncorrected,
        "xid": xid,
    }
