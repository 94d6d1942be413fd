"""Fake-node profiles: the JSON files that describe a fake GPU node.

A profile names the node, its driver/CUDA versions, CPUs and RAM, its GPUs by model (optionally split into
MIG slices) and scripted faults::

    {"node": "gpu-a100-01", "driver_version": "550.54.15", "cuda_version": "12.4",
     "cpus": 64, "memory_mb": 515000,
     "gpus": [{"model": "a100-40gb", "count": 4, "memory_mb": 40960},
              {"model": "a100-40gb", "count": 1, "mig": ["3g.20gb", "2g.10gb", "1g.5gb"]}],
     "faults": [{"at_s": 30, "gpu": 3, "xid": 79}, {"at_s": 60, "gpu": 1, "ecc": 2}],
     "fault_file": "/tmp/gpu-a100-01.faults"}

A fault is one of ``{"xid": N}``, ``{"ecc": N}`` (N more uncorrected errors), ``{"lost": true}`` or
``{"temperature_c": N}``, for physical GPU ``gpu`` at ``at_s`` seconds after the backend starts. Lines of
the same JSON objects appended to ``fault_file`` apply as soon as the backend polls it (``at_s`` ignored).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# model slug -> (driver name, memory MiB, board power W, max SM clock MHz)
KNOWN_MODELS: dict[str, tuple[str, int, float, int]] = {
    "h100-80gb": ("NVIDIA H100 80GB HBM3", 81559, 700.0, 1980),
    "h200-141gb": ("NVIDIA H200", 143771, 700.0, 1980),
    "a100-40gb": ("NVIDIA A100-SXM4-40GB", 40960, 400.0, 1410),
    "a100-80gb": ("NVIDIA A100-SXM4-80GB", 81920, 400.0, 1410),
    "l40s-48gb": ("NVIDIA L40S", 46068, 350.0, 2520),
    "l4-24gb": ("NVIDIA L4", 23034, 72.0, 2040),
}
FAULT_KINDS = ("xid", "ecc", "lost", "temperature_c")
_MIG_SLICE = re.compile(r"^(\d+)g\.(\d+)gb$")


class ProfileError(ValueError):
    """A profile file that cannot describe a node; the message names the offending field."""


@dataclass(frozen=True, slots=True)
class FakeGpu:
    """One physical fake GPU; ``mig`` lists its slice profiles (empty: not partitioned)."""

    index: int
    model: str
    name: str
    memory_mb: int
    power_w: float
    sm_clock_mhz: int
    mig: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Fault:
    """A scripted fault: ``kind`` (xid, ecc, lost, temperature_c) with ``value`` on GPU ``gpu``."""

    gpu: int
    kind: str
    value: int
    at_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Profile:
    """A whole fake node."""

    node: str
    driver_version: str
    cuda_version: str
    cpus: int
    memory_mb: int
    gpus: tuple[FakeGpu, ...]
    faults: tuple[Fault, ...] = ()
    fault_file: str | None = None


def mig_slice_memory_mb(profile: str) -> int:
    """Memory of a MIG slice from its profile name (``"1g.10gb"`` -> 10240 MiB)."""
    match = _MIG_SLICE.match(profile)
    if match is None:
        raise ProfileError(f"mig: {profile!r} is not a MIG profile such as '1g.10gb'")
    return int(match.group(2)) * 1024


def parse_fault(data: Any, *, gpu_count: int, where: str = "faults") -> Fault:
    """Validate one fault object (see the module docstring)."""
    if not isinstance(data, dict):
        raise ProfileError(f"{where}: a fault must be a JSON object")
    kinds = [kind for kind in FAULT_KINDS if kind in data]
    if len(kinds) != 1:
        raise ProfileError(f"{where}: a fault needs exactly one of {', '.join(FAULT_KINDS)}")
    gpu = data.get("gpu")
    if not isinstance(gpu, int) or not 0 <= gpu < gpu_count:
        raise ProfileError(f"{where}.gpu: must be a GPU index between 0 and {gpu_count - 1}")
    kind = kinds[0]
    raw = data[kind]
    value = 1 if kind == "lost" else raw
    if kind != "lost" and (not isinstance(raw, int) or isinstance(raw, bool) or raw < 0):
        raise ProfileError(f"{where}.{kind}: must be a non-negative integer")
    at_s = data.get("at_s", 0)
    if not isinstance(at_s, int | float) or at_s < 0:
        raise ProfileError(f"{where}.at_s: must be a non-negative number of seconds")
    return Fault(gpu=gpu, kind=kind, value=int(value), at_s=float(at_s))


def _expand_gpus(entries: Any) -> tuple[FakeGpu, ...]:
    if not isinstance(entries, list) or not entries:
        raise ProfileError("gpus: must be a non-empty list")
    gpus: list[FakeGpu] = []
    for position, entry in enumerate(entries):
        where = f"gpus[{position}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("model"), str):
            raise ProfileError(f"{where}.model: required")
        model = entry["model"]
        known = KNOWN_MODELS.get(model)
        if known is None and ("name" not in entry or "memory_mb" not in entry):
            raise ProfileError(f"{where}: unknown model {model!r} needs a name and memory_mb")
        name, memory_mb, power_w, clock = known or (entry["name"], entry["memory_mb"], 300.0, 1800)
        count = entry.get("count", 1)
        if not isinstance(count, int) or count < 1:
            raise ProfileError(f"{where}.count: must be a positive integer")
        mig = tuple(entry.get("mig", ()))
        for slice_profile in mig:
            mig_slice_memory_mb(slice_profile)
        for _ in range(count):
            gpus.append(
                FakeGpu(
                    index=len(gpus),
                    model=model,
                    name=str(entry.get("name", name)),
                    memory_mb=int(entry.get("memory_mb", memory_mb)),
                    power_w=float(entry.get("power_w", power_w)),
                    sm_clock_mhz=int(entry.get("sm_clock_mhz", clock)),
                    mig=mig,
                )
            )
    return tuple(gpus)


def parse_profile(data: Any) -> Profile:
    """Validate a decoded profile and expand its GPU list into one entry per physical GPU."""
    if not isinstance(data, dict):
        raise ProfileError("profile: must be a JSON object")
    if not isinstance(data.get("node"), str) or not data["node"]:
        raise ProfileError("node: required")
    gpus = _expand_gpus(data.get("gpus"))
    faults = tuple(
        parse_fault(item, gpu_count=len(gpus), where=f"faults[{n}]")
        for n, item in enumerate(data.get("faults", []))
    )
    fault_file = data.get("fault_file")
    if fault_file is not None and not isinstance(fault_file, str):
        raise ProfileError("fault_file: must be a path")
    return Profile(
        node=data["node"],
        driver_version=str(data.get("driver_version", "550.54.15")),
        cuda_version=str(data.get("cuda_version", "12.4")),
        cpus=int(data.get("cpus", 32)),
        memory_mb=int(data.get("memory_mb", 256000)),
        gpus=gpus,
        faults=faults,
        fault_file=fault_file,
    )


def load_profile(path: str | Path) -> Profile:
    """Read and validate a profile file; a bare name such as ``h100x8`` means a shipped profile."""
    candidate = Path(path)
    if not candidate.exists() and candidate.suffix == "" and "/" not in str(path):
        candidate = Path(__file__).resolve().parent.parent / "profiles" / f"{path}.json"
    try:
        data = json.loads(candidate.read_text())
    except OSError as error:
        raise ProfileError(f"profile: cannot read {path}: {error.strerror}") from error
    except json.JSONDecodeError as error:
        raise ProfileError(f"profile: {path} is not valid JSON ({error})") from error
    return parse_profile(data)
