"""Teams, quotas and priority classes for a simulation: from a YAML file or derived from the trace.

Derived quotas give each team, for every GPU model of the cluster, a guarantee proportional to its
share of the trace's GPU-seconds, no limit beyond capacity (it may borrow everything idle) and weight 1.

A quota file (YAML)::

    default: {guaranteed: 0, limit: null, weight: 1}   # optional: for trace teams not listed below
    teams:
      6214e9:
        guaranteed: 25%          # shorthand: the same quota for every GPU model (% of that model)
        limit: 300
      11cb48:
        pools: [train]           # optional: the pools it may use (default: every pool open to it)
        parent: research         # optional: department
        quotas:                  # per GPU model
          v100: {guaranteed: 64, limit: 128, weight: 2, non_lendable: 8}

A trace team that the file does not list gets ``default`` (without one: no guarantee, no limit).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from scheduler.core.types import QuotaInfo, TeamInfo
from scheduler.sim.cluster import Cluster
from scheduler.sim.trace import Trace, TraceError

_QUOTA_KEYS = {"guaranteed", "limit", "weight", "non_lendable", "pool"}


@dataclass(frozen=True, slots=True)
class TeamSetup:
    """Teams and quotas handed to every snapshot, plus where they came from."""

    teams: tuple[TeamInfo, ...]
    quotas: tuple[QuotaInfo, ...]
    source: str = "derived"

    def guaranteed_by_team(self) -> dict[str, float]:
        """Total guaranteed GPUs per team, all models and pools together."""
        totals = {team.name: 0.0 for team in self.teams}
        for quota in self.quotas:
            totals[quota.team] = totals.get(quota.team, 0.0) + quota.guaranteed
        return totals

    def limits(self) -> dict[tuple[str, str], float]:
        """(team, model) -> limit in GPUs, for quotas that have one (pools summed)."""
        limits: dict[tuple[str, str], float] = {}
        for quota in self.quotas:
            if quota.limit is not None:
                key = (quota.team, quota.gpu_model)
                limits[key] = limits.get(key, 0.0) + quota.limit
        return limits


def derive_quotas(trace: Trace, cluster: Cluster) -> TeamSetup:
    """Guarantees proportional to each team's share of the trace's GPU-seconds, for every model."""
    offered = trace.gpu_seconds_by_team()
    total = sum(offered.values()) or 1.0
    teams = tuple(TeamInfo(name=name, pools=cluster.pools_for(name)) for name in offered)
    quotas = []
    for model, capacity in cluster.capacity_by_model().items():
        for name, gpu_s in offered.items():
            # Round down to 1/1000 GPU so the guarantees never add up to more than the capacity.
            guaranteed = int(capacity * gpu_s / total * 1000) / 1000
            quotas.append(QuotaInfo(team=name, gpu_model=model, guaranteed=guaranteed))
    return TeamSetup(teams=teams, quotas=tuple(quotas), source="derived from trace GPU-seconds")


def _number(value: object, where: str, capacity: int, *, allow_none: bool = False) -> float | None:
    """A YAML quota number: ``12``, ``12.5`` or ``"25%"`` of the model's capacity."""
    if value is None and allow_none:
        return None
    if isinstance(value, str) and value.strip().endswith("%"):
        try:
            return float(value.strip()[:-1]) / 100 * capacity
        except ValueError:
            pass
    elif isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)
    raise TraceError(f"{where}: expected a number >= 0 or a percentage such as '25%', got {value!r}")


def _quota(team: str, model: str, spec: object, where: str, capacity: int) -> QuotaInfo:
    """Build one QuotaInfo from a YAML mapping."""
    if not isinstance(spec, dict):
        raise TraceError(f"{where}: expected a mapping with guaranteed/limit/weight")
    unknown = set(spec) - _QUOTA_KEYS
    if unknown:
        raise TraceError(f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))}")
    guaranteed = _number(spec.get("guaranteed", 0), f"{where}.guaranteed", capacity) or 0.0
    limit = _number(spec.get("limit"), f"{where}.limit", capacity, allow_none=True)
    if limit is not None and limit < guaranteed:
        raise TraceError(f"{where}: limit {limit:g} is below guaranteed {guaranteed:g}")
    weight = _number(spec.get("weight", 1.0), f"{where}.weight", capacity) or 0.0
    non_lendable = _number(spec.get("non_lendable", 0), f"{where}.non_lendable", capacity) or 0.0
    pool = spec.get("pool")
    return QuotaInfo(
        team=team,
        gpu_model=model,
        guaranteed=guaranteed,
        limit=limit,
        weight=weight,
        non_lendable=non_lendable,
        pool=None if pool is None else str(pool),
    )


def load_quotas(path: str | Path, trace: Trace, cluster: Cluster) -> TeamSetup:
    """Load a quota YAML file (see the module docstring); errors name the file and the key."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise TraceError(f"{path}: cannot open: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise TraceError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("teams", {}), dict):
        raise TraceError(f"{path}: expected a mapping with a 'teams' mapping")
    capacity = cluster.capacity_by_model()
    listed: dict[str, object] = {str(k): v for k, v in (data.get("teams") or {}).items()}
    default = data.get("default")
    teams: list[TeamInfo] = []
    quotas: list[QuotaInfo] = []
    for name in dict.fromkeys([*listed, *trace.teams]):
        where = f"{path}: teams.{name}" if name in listed else f"{path}: default"
        spec = listed.get(name, default if default is not None else {})
        if not isinstance(spec, dict):
            raise TraceError(f"{where}: expected a mapping")
        unknown = set(spec) - _QUOTA_KEYS - {"pools", "parent", "quotas"}
        if unknown:
            raise TraceError(f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))}")
        pools = spec.get("pools")
        if pools is None:
            team_pools = cluster.pools_for(name)
        elif isinstance(pools, list) and all(str(p) in cluster.pools for p in pools):
            team_pools = frozenset(str(p) for p in pools)
        else:
            raise TraceError(f"{where}.pools: expected a list of pools among {', '.join(cluster.pools)}")
        parent = spec.get("parent")
        teams.append(TeamInfo(name=name, parent=None if parent is None else str(parent), pools=team_pools))
        per_model = spec.get("quotas")
        shorthand = {k: v for k, v in spec.items() if k in _QUOTA_KEYS}
        if per_model is None:
            for model, cap in capacity.items():
                quotas.append(_quota(name, model, shorthand, where, cap))
        elif isinstance(per_model, dict):
            for model, quota_spec in per_model.items():
                model_name = str(model).lower()
                if model_name not in capacity:
                    raise TraceError(
                        f"{where}.quotas.{model}: the cluster has no GPU model {model!r} "
                        f"(it has {', '.join(capacity)})"
                    )
                quotas.append(
                    _quota(name, model_name, quota_spec, f"{where}.quotas.{model}", capacity[model_name])
                )
        else:
            raise TraceError(f"{where}.quotas: expected a mapping of GPU model to quota")
    return TeamSetup(teams=tuple(teams), quotas=tuple(quotas), source=path.name)


def resolve_quotas(path: str | Path | None, trace: Trace, cluster: Cluster) -> TeamSetup:
    """``--quotas FILE`` when given, else quotas derived from the trace."""
    return derive_quotas(trace, cluster) if path is None else load_quotas(path, trace, cluster)
