"""The GPU device files a container gets: only those of its allocated GPUs.

With the NVML backend these are the driver's ``/dev/nvidiaN`` plus the shared control devices. With the
fake backend the agent makes one stand-in per fake GPU, ``<work_dir>/devices/nvidiaN``: a character
device that reads like ``/dev/zero`` (major 1, minor 5), mounted in the container at ``/dev/nvidiaN``.
A job therefore finds exactly its own GPUs' device files, whether or not it unsets
``CUDA_VISIBLE_DEVICES``.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from scheduler.agent.jobs import AssignedGpu

SHARED_NVIDIA = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
_FAKE_DEVICE = os.makedev(1, 5)


def physical_index(gpu: AssignedGpu) -> int:
    """The GPU a device belongs to: its own index, or a MIG slice's (100 + 10 x parent + slot) parent."""
    return (gpu.index - 100) // 10 if gpu.uuid.startswith("MIG-") and gpu.index >= 100 else gpu.index


class GpuDeviceFiles:
    """Maps an assignment's GPUs to ``(host path, container path)`` pairs for ``podman run --device``."""

    def __init__(self, fake_dir: Path | None = None, dev_dir: Path = Path("/dev")) -> None:
        """``fake_dir``: where the fake backend's stand-ins live (made on demand); None for real devices."""
        self.fake_dir = fake_dir
        self.dev_dir = dev_dir

    def for_gpus(self, gpus: Iterable[AssignedGpu]) -> list[tuple[str, str]]:
        """The device files of these GPUs (and, for real GPUs, the driver's shared control devices)."""
        indices = sorted({physical_index(gpu) for gpu in gpus})
        if not indices:
            return []
        if self.fake_dir is not None:
            return [(str(self._fake(index)), f"/dev/nvidia{index}") for index in indices]
        pairs = [(str(self.dev_dir / f"nvidia{index}"), f"/dev/nvidia{index}") for index in indices]
        shared = [self.dev_dir / name for name in SHARED_NVIDIA if (self.dev_dir / name).exists()]
        return pairs + [(str(path), f"/dev/{path.name}") for path in shared]

    def _fake(self, index: int) -> Path:
        assert self.fake_dir is not None
        self.fake_dir.mkdir(mode=0o711, parents=True, exist_ok=True)
        path = self.fake_dir / f"nvidia{index}"
        if not path.exists():
            os.mknod(path, 0o666 | stat.S_IFCHR, _FAKE_DEVICE)
            path.chmod(0o666)  # as a driver's device node: the container's devices list is the fence
        return path
