"""Turning the driver's device names into Rota's GPU-model slugs.

``"NVIDIA H100 80GB HBM3"`` -> ``h100-80gb``, ``"NVIDIA A100-SXM4-40GB"`` -> ``a100-40gb``,
``"NVIDIA L40S"`` (46068 MiB) -> ``l40s-48gb``, a ``1g.10gb`` MIG slice of an A100 -> ``a100-1g.10gb``.
The family is the first token that looks like a product number; the memory size comes from the name
when it carries one, otherwise from the nearest marketed size to the memory the driver reports.
"""

from __future__ import annotations

import re

# Marketed memory sizes in GB; drivers report a little less than the label (81559 MiB on an "80GB").
NOMINAL_SIZES_GB = (4, 6, 8, 10, 11, 12, 16, 20, 24, 32, 40, 48, 64, 80, 94, 96, 141, 144, 180, 192, 288)

_VENDOR_WORDS = {"nvidia", "tesla", "geforce", "quadro"}
_NOT_FAMILY = re.compile(r"^(\d+gb|sxm\d*|pcie|nvl|hbm\d*e?|mig|\d+g\.\d+gb.*)$")
_MEMORY_IN_NAME = re.compile(r"(?<![.\d])(\d+)\s*gb\b")
_MIG_PROFILE = re.compile(r"(\d+g\.\d+gb(?:\+[a-z]+)?)")


def mig_profile_of(name: str) -> str | None:
    """The MIG profile in a device name (``"... MIG 1g.10gb"`` -> ``1g.10gb``), or None."""
    match = _MIG_PROFILE.search(name.lower())
    return match.group(1) if match else None


def family_of(name: str) -> str:
    """The product family of a device name: ``"NVIDIA A100-SXM4-40GB"`` -> ``a100``.

    Falls back to a slug of the whole name when no token looks like a product number.
    """
    tokens = [t for t in re.split(r"[\s\-_/]+", name.lower()) if t and t not in _VENDOR_WORDS]
    for position, token in enumerate(tokens):
        if any(c.isdigit() for c in token) and not _NOT_FAMILY.match(token):
            if token.isdigit() and position > 0:  # "RTX 4090" -> "rtx4090"
                return tokens[position - 1] + token
            return token
    return re.sub(r"[^a-z0-9]+", "-", " ".join(tokens)).strip("-") or "gpu"


def nominal_memory_gb(memory_mb: int) -> int:
    """The marketed size (GB) closest, relatively, to a reported memory size in MiB."""
    gib = memory_mb / 1024
    return min(NOMINAL_SIZES_GB, key=lambda size: abs(size - gib) / size)


def model_slug(name: str, memory_mb: int, *, parent_name: str | None = None) -> str:
    """Rota's GPU-model slug for a device.

    ``name`` is the device name as the driver reports it; ``memory_mb`` its memory in MiB. For a MIG
    slice pass the slice's name (it contains the profile) and the whole GPU's name as ``parent_name``.
    """
    profile = mig_profile_of(name)
    if profile is not None:
        return f"{family_of(parent_name or name)}-{profile}"
    match = _MEMORY_IN_NAME.search(name.lower())
    size = int(match.group(1)) if match else nominal_memory_gb(memory_mb)
    return f"{family_of(name)}-{size}gb"
