"""GPU backends behind one interface: NVML on real nodes, a profile-driven fake elsewhere."""

from __future__ import annotations

import logging
from typing import Any

from scheduler.agent.gpu.base import GpuBackend, GpuEvent, GpuInfo, GpuSample, SystemInfo
from scheduler.agent.gpu.fake import FakeBackend
from scheduler.agent.gpu.nvml import NvmlBackend, NvmlUnavailable
from scheduler.agent.gpu.profile import load_profile

log = logging.getLogger(__name__)
BACKEND_KINDS = ("auto", "nvml", "fake")
DEFAULT_PROFILE = "h100x8"

__all__ = [
    "BACKEND_KINDS",
    "FakeBackend",
    "GpuBackend",
    "GpuEvent",
    "GpuInfo",
    "GpuSample",
    "NvmlBackend",
    "NvmlUnavailable",
    "SystemInfo",
    "open_backend",
]


def open_backend(
    kind: str,
    *,
    profile: str | None = None,
    fault_file: str | None = None,
    nvml: Any = None,
    node: str | None = None,
) -> GpuBackend:
    """Open the backend named ``kind``: ``nvml``, ``fake`` or ``auto`` (NVML when it starts, else fake).

    ``profile`` is the fake node's profile file (or a shipped profile's name, e.g. ``a100x4``); ``node``
    names the fake node instead of its profile.
    """
    if kind not in BACKEND_KINDS:
        raise ValueError(f"gpu backend must be one of {', '.join(BACKEND_KINDS)}, not {kind!r}")
    if kind in ("nvml", "auto"):
        try:
            return NvmlBackend(nvml)
        except NvmlUnavailable as error:
            if kind == "nvml":
                raise
            log.warning(
                "NVML is not available (%s); using the fake GPU backend (development only: pass "
                "--gpu-backend nvml on a real GPU node, so a broken driver stops the agent instead)",
                error,
            )
    return FakeBackend(load_profile(profile or DEFAULT_PROFILE), fault_file=fault_file, node=node)
