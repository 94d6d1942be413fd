"""Cluster specs: ``72x8:v100`` strings, YAML node-group files, or the node list a trace brings.

A spec string is comma-separated groups ``COUNTxGPUS[:MODEL][@POOL]``, e.g.
``64x8:v100@train,8x8:v100@infer``; the model defaults to ``gpu`` and the pool to ``default``.
A YAML file lists node groups and, optionally, which teams may use each pool::

    node_groups:
      - {count: 64, gpus: 8, model: v100, pool: train, cpus: 64, memory_gb: 512, gpu_memory_gb: 32}
      - {count: 8, gpus: 8, model: v100, pool: infer, labels: {network: ib}}
    pools:
      infer: [team-a, team-b]   # a pool not listed here is open to every team

Node and device names are deterministic: ``node-0000``... in spec order, device ids 1, 2, ...
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

import yaml

from scheduler.core.types import GpuDevice, NodeInfo
from scheduler.sim.trace import TraceError, TraceNode

DEFAULT_MODEL = "gpu"
DEFAULT_POOL = "default"
DEFAULT_GPU_MEMORY_MB = 16 * 1024

# Device memory for model names that do not say it themselves ("a100-80gb" does).
KNOWN_GPU_MEMORY_MB = {
    "v100": 16 * 1024,
    "v100m16": 16 * 1024,
    "v100m32": 32 * 1024,
    "p100": 16 * 1024,
    "t4": 16 * 1024,
    "a10": 24 * 1024,
    "a100": 40 * 1024,
    "h100": 80 * 1024,
    "l40s": 48 * 1024,
    "k80": 12 * 1024,
}

_GROUP = re.compile(r"^(\d+)x(\d+)(?::([A-Za-z0-9._-]+))?(?:@([A-Za-z0-9._-]+))?$")
_MEMORY_IN_NAME = re.compile(r"(\d+)gb$")


@dataclass(frozen=True, slots=True)
class NodeGroup:
    """``count`` identical nodes of ``gpus`` devices of ``model`` in ``pool``."""

    count: int
    gpus: int
    model: str = DEFAULT_MODEL
    pool: str = DEFAULT_POOL
    cpus: int = 0
    memory_mb: int = 0
    gpu_memory_mb: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Cluster:
    """The simulated nodes, plus pool access rules (a pool absent from ``pool_teams`` is open to all)."""

    nodes: tuple[NodeInfo, ...]
    pool_teams: Mapping[str, frozenset[str]] = field(default_factory=dict)
    description: str = ""

    @property
    def capacity(self) -> int:
        """Total number of devices."""
        return sum(len(node.gpus) for node in self.nodes)

    def capacity_by_model(self) -> dict[str, int]:
        """Devices per GPU model, in order of first appearance."""
        counts: dict[str, int] = {}
        for node in self.nodes:
            for gpu in node.gpus:
                counts[gpu.model] = counts.get(gpu.model, 0) + 1
        return counts

    @property
    def pools(self) -> tuple[str, ...]:
        """Pool names in order of first appearance."""
        return tuple(dict.fromkeys(node.pool for node in self.nodes))

    def pools_for(self, team: str) -> frozenset[str]:
        """The pools ``team`` may use."""
        return frozenset(p for p in self.pools if p not in self.pool_teams or team in self.pool_teams[p])


def gpu_memory_mb(model: str) -> int:
    """Device memory for ``model``: from a ``-80gb`` style suffix, a table of known models, or 16 GiB."""
    match = _MEMORY_IN_NAME.search(model)
    if match:
        return int(match.group(1)) * 1024
    return KNOWN_GPU_MEMORY_MB.get(model, DEFAULT_GPU_MEMORY_MB)


def build_cluster(
    groups: list[NodeGroup], pool_teams: Mapping[str, frozenset[str]] | None = None, description: str = ""
) -> Cluster:
    """Materialise node groups into NodeInfo/GpuDevice values with deterministic names and ids."""
    nodes: list[NodeInfo] = []
    gpu_id = 0
    for group in groups:
        memory = group.gpu_memory_mb or gpu_memory_mb(group.model)
        for _ in range(group.count):
            name = f"node-{len(nodes):04d}"
            devices = []
            for index in range(group.gpus):
                gpu_id += 1
                devices.append(
                    GpuDevice(id=gpu_id, node=name, index=index, model=group.model, memory_mb=memory)
                )
            nodes.append(
                NodeInfo(
                    name=name,
                    pool=group.pool,
                    gpus=tuple(devices),
                    cpus=group.cpus,
                    memory_mb=group.memory_mb,
                    labels=group.labels,
                )
            )
    return Cluster(nodes=tuple(nodes), pool_teams=dict(pool_teams or {}), description=description)


def parse_spec(spec: str) -> list[NodeGroup]:
    """Parse ``64x8:v100@train,8x8:v100@infer`` into node groups; ValueError names the bad group."""
    groups = []
    for part in spec.split(","):
        text = part.strip()
        match = _GROUP.match(text)
        if not match:
            raise ValueError(
                f"bad cluster group {text!r} in {spec!r}: expected COUNTxGPUS[:MODEL][@POOL], "
                "e.g. 72x8:v100 or 8x8:a100-80gb@infer"
            )
        count, gpus = int(match.group(1)), int(match.group(2))
        if count == 0 or gpus == 0:
            raise ValueError(f"bad cluster group {text!r}: node count and GPUs per node must be positive")
        groups.append(
            NodeGroup(
                count=count,
                gpus=gpus,
                model=(match.group(3) or DEFAULT_MODEL).lower(),
                pool=match.group(4) or DEFAULT_POOL,
            )
        )
    return groups


def _positive_int(value: object, where: str, *, allow_zero: bool = False) -> int:
    """Check a YAML value is a whole number (> 0 unless ``allow_zero``)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or (value == 0 and not allow_zero):
        raise TraceError(
            f"{where}: expected a {'non-negative' if allow_zero else 'positive'} whole number, got {value!r}"
        )
    return value


def _group_from_yaml(item: object, where: str) -> NodeGroup:
    """One entry of ``node_groups``."""
    if not isinstance(item, dict):
        raise TraceError(f"{where}: expected a mapping with count, gpus, model, pool")
    unknown = set(item) - {"count", "gpus", "model", "pool", "cpus", "memory_gb", "gpu_memory_gb", "labels"}
    if unknown:
        raise TraceError(f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))}")
    labels = item.get("labels") or {}
    if not isinstance(labels, dict):
        raise TraceError(f"{where}.labels: expected a mapping")
    return NodeGroup(
        count=_positive_int(item.get("count"), f"{where}.count"),
        gpus=_positive_int(item.get("gpus"), f"{where}.gpus"),
        model=str(item.get("model", DEFAULT_MODEL)).lower(),
        pool=str(item.get("pool", DEFAULT_POOL)),
        cpus=_positive_int(item.get("cpus", 0), f"{where}.cpus", allow_zero=True),
        memory_mb=_positive_int(item.get("memory_gb", 0), f"{where}.memory_gb", allow_zero=True) * 1024,
        gpu_memory_mb=_positive_int(item.get("gpu_memory_gb", 0), f"{where}.gpu_memory_gb", allow_zero=True)
        * 1024,
        labels=MappingProxyType({str(k): str(v) for k, v in labels.items()}),
    )


def load_cluster_yaml(path: str | Path) -> Cluster:
    """Load a YAML cluster file (see the module docstring); errors name the file and the key."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise TraceError(f"{path}: cannot open: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise TraceError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("node_groups"), list) or not data["node_groups"]:
        raise TraceError(f"{path}: expected a mapping with a non-empty 'node_groups' list")
    groups = [
        _group_from_yaml(item, f"{path}: node_groups[{i}]") for i, item in enumerate(data["node_groups"])
    ]
    pools_yaml = data.get("pools") or {}
    if not isinstance(pools_yaml, dict):
        raise TraceError(f"{path}: pools: expected a mapping of pool name to a list of teams")
    pool_teams: dict[str, frozenset[str]] = {}
    known_pools = {g.pool for g in groups}
    for pool, teams in pools_yaml.items():
        if pool not in known_pools:
            raise TraceError(f"{path}: pools.{pool}: no node group is in this pool")
        if teams == "all":
            continue
        if not isinstance(teams, list):
            raise TraceError(f"{path}: pools.{pool}: expected a list of teams or 'all'")
        pool_teams[str(pool)] = frozenset(str(t) for t in teams)
    return build_cluster(groups, pool_teams, description=path.name)


def cluster_from_trace_nodes(nodes: tuple[TraceNode, ...], description: str = "trace node list") -> Cluster:
    """Build the cluster a trace describes (openb): one node per row, names kept, one pool."""
    built = []
    gpu_id = 0
    for node in nodes:
        devices = []
        for index in range(node.gpus):
            gpu_id += 1
            devices.append(
                GpuDevice(
                    id=gpu_id,
                    node=node.name,
                    index=index,
                    model=node.model,
                    memory_mb=gpu_memory_mb(node.model),
                )
            )
        built.append(
            NodeInfo(
                name=node.name,
                pool=DEFAULT_POOL,
                gpus=tuple(devices),
                cpus=node.cpus,
                memory_mb=node.memory_mb,
            )
        )
    return Cluster(nodes=tuple(built), description=description)


def load_cluster(spec: str | None, trace_nodes: tuple[TraceNode, ...] = ()) -> Cluster:
    """Resolve ``--cluster``: a YAML file, a spec string, or (None or ``trace``) the trace's own nodes."""
    if spec is None or spec == "trace":
        if not trace_nodes:
            raise ValueError("this trace has no node list: give --cluster, e.g. 72x8:v100")
        return cluster_from_trace_nodes(trace_nodes)
    if spec.endswith((".yaml", ".yml")):
        return load_cluster_yaml(spec)
    return build_cluster(parse_spec(spec), description=spec)
