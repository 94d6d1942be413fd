"""Slurm's nodes as Rota sees them (pure: no I/O). ``sinfo --json`` in, node reports for the node API out:
GPUs from the GRES (model from the GRES type), CPUs, memory, features as labels, and the node's Slurm state
and reason mapped onto Rota's (``DRAIN`` -> draining/drained, ``DOWN`` -> down)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

BRIDGE_VERSION = "rota-slurm-bridge/1"
ENGINE = "slurm"
BUSY_STATES = {"mixed", "allocated", "completing"}
DOWN_STATES = {"down", "unknown", "future", "error"}
OUT_FLAGS = {"DRAIN", "FAIL"}  # Slurm starts no new work on a node with either
_GRES_ITEM = re.compile(r"^(?P<name>[^:()]+)(?::(?P<type>[^:()]+))?:(?P<count>\d+)(?:\(.*\))?$")
_SIZE_IN_SLUG = re.compile(r"-(\d+)gb$")


class InventoryError(ValueError):
    """A Slurm node that cannot be described to Rota; the message names the node and what to set."""


@dataclass(frozen=True)
class GpuModelMap:
    """GRES type -> (Rota's GPU-model slug, memory per device in MiB). A type that is not mapped is used as
    the slug itself when it names a size (``h100-80gb``); the size then gives the memory."""

    models: dict[str, tuple[str, int]] = field(default_factory=dict)

    @classmethod
    def parse(cls, specs: list[str]) -> GpuModelMap:
        """``["h100=h100-80gb:81559", "a100=a100-40gb"]`` (the memory defaults to the slug's size)."""
        models = {}
        for spec in specs:
            gres_type, _, target = spec.partition("=")
            slug, _, memory = target.partition(":")
            if not gres_type or not slug:
                raise InventoryError(f"--gpu-model {spec!r}: write TYPE=SLUG[:MEMORY_MB], e.g. h100=h100-80gb:81559")
            if memory and not memory.isdigit():
                raise InventoryError(f"--gpu-model {spec!r}: MEMORY_MB must be a whole number of MiB")
            models[gres_type] = (slug, int(memory) if memory else _size_mb(slug, spec))
        return cls(models)

    def resolve(self, node: str, gres_type: str) -> tuple[str, int]:
        if gres_type in self.models:
            return self.models[gres_type]
        slug = gres_type.lower().replace("_", "-")
        if _SIZE_IN_SLUG.search(slug):
            return slug, _size_mb(slug, gres_type)
        hint = f"--gpu-model {gres_type or 'TYPE'}=SLUG:MEMORY_MB (e.g. {gres_type or 'h100'}=h100-80gb:81559)"
        what = f"GRES type {gres_type!r}" if gres_type else "GPUs without a GRES type"
        raise InventoryError(f"node {node}: {what} names no GPU model and size; give the bridge {hint}")


def _size_mb(slug: str, spec: str) -> int:
    match = _SIZE_IN_SLUG.search(slug)
    if not match:
        raise InventoryError(f"--gpu-model {spec!r}: {slug!r} names no size (like h100-80gb): add :MEMORY_MB")
    return int(match.group(1)) * 1024


@dataclass(frozen=True)
class SlurmNode:
    """One node as ``sinfo --json`` reports it."""

    name: str
    state: str  # Slurm's base state, lower case: idle, mixed, allocated, down…
    flags: frozenset[str]  # DRAIN, FAIL, NOT_RESPONDING…
    reason: str
    gres: str
    cpus: int
    memory_mb: int
    features: tuple[str, ...]
    partitions: tuple[str, ...]

    @property
    def rota_state(self) -> str:
        """Rota's word for the node's Slurm state: ready, draining, drained or down."""
        if self.state in DOWN_STATES:
            return "down"
        if self.flags & OUT_FLAGS:
            return "draining" if self.state in BUSY_STATES or "COMPLETING" in self.flags else "drained"
        return "ready"

    @property
    def drained_by_rota(self) -> bool:
        return bool(self.flags & {"DRAIN"}) and self.reason.startswith("rota: ")

    def engine_report(self) -> dict:
        """``engine`` of the node API: what Slurm says of this node."""
        state = self.rota_state
        reason = self.reason if state != "ready" else ""
        if state != "ready" and not reason:
            reason = f"{self.state}{'+' + '+'.join(sorted(self.flags)) if self.flags else ''} in Slurm"
        return {"name": ENGINE, "state": state, "reason": reason[:250]}

    def gpus(self, models: GpuModelMap) -> list[dict]:
        """The node's GPUs from its GRES, numbered in GRES order; a UUID per (node, type, index) stays the same
        across polls and bridge restarts. ``gres_type`` is what ``--gres=gpu:<type>:N`` asks Slurm for (the
        portal ignores it)."""
        devices = []
        for item in filter(None, self.gres.split(",")):
            match = _GRES_ITEM.match(item.strip())
            if not match or match["name"] != "gpu":
                continue
            slug, memory_mb = models.resolve(self.name, match["type"] or "")
            for _ in range(int(match["count"])):
                index = len(devices)
                devices.append({"index": index, "uuid": f"SLURM-{self.name}-{match['type'] or 'gpu'}-{index}"[:80],
                                "model": slug, "name": match["type"] or slug, "memory_mb": memory_mb,
                                "gres_type": match["type"] or ""})
        return devices

    def register_report(self, models: GpuModelMap) -> dict:
        """The body of ``POST /api/v1/node/register/`` for this node."""
        return {
            "hostname": self.name, "agent_version": BRIDGE_VERSION, "gpu_backend": ENGINE,
            "cpus": self.cpus, "memory_mb": self.memory_mb, "gpus": self.gpus(models),
            "labels": {feature.lower(): "true" for feature in self.features},
            "engine": self.engine_report(),
        }


def parse_sinfo(text: str) -> list[SlurmNode]:
    """The nodes of ``sinfo --json`` (each once, though sinfo lists a node per partition)."""
    try:
        data = json.loads(text)
    except ValueError as error:
        raise InventoryError(f"sinfo --json did not print JSON: {error}") from None
    nodes: dict[str, SlurmNode] = {}
    for raw in data.get("nodes") or []:
        features = raw.get("active_features") or raw.get("features") or ""
        nodes[raw["name"]] = SlurmNode(
            name=raw["name"], state=str(raw.get("state") or "unknown").lower(),
            flags=frozenset(str(f).upper() for f in raw.get("state_flags") or []),
            reason=raw.get("reason") or "", gres=raw.get("gres") or "", cpus=int(raw.get("cpus") or 0),
            memory_mb=int(raw.get("real_memory") or 0),
            features=tuple(f for f in features.split(",") if f),
            partitions=tuple(raw.get("partitions") or ()),
        )
    return list(nodes.values())
