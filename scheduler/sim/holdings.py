"""What each team holds per GPU model, measured against its quotas (limits and guarantees)."""

from __future__ import annotations

from scheduler.sim.quotas import TeamSetup

_EPS = 1e-9


class Holdings:
    """GPUs held per (team, model), with limit checks that include ancestors in the team tree.

    ``guaranteed`` and ``limits`` sum a team's rows over pools; ``has_parents`` tells whether the
    setup has a team tree.
    """

    def __init__(self, setup: TeamSetup, teams: list[str]) -> None:
        self.held: dict[tuple[str, str], float] = {}
        self.limits = setup.limits()
        self.guaranteed: dict[str, dict[str, float]] = {}
        for quota in setup.quotas:
            models = self.guaranteed.setdefault(quota.team, {})
            models[quota.gpu_model] = models.get(quota.gpu_model, 0.0) + quota.guaranteed
        parents = {t.name: t.parent for t in setup.teams}
        self.has_parents = any(parents.values())
        self.lineage = {team: _lineage(team, parents) for team in dict.fromkeys([*parents, *teams])}

    def change(self, team: str, models: dict[str, float], sign: int) -> None:
        """Add (+1) or remove (-1) the per-model amounts of one job of ``team``."""
        for model, amount in models.items():
            key = (team, model)
            self.held[key] = self.held.get(key, 0.0) + sign * amount

    def over_limit(self, team: str, models: dict[str, float]) -> list[str]:
        """Descriptions of every limit that ``team`` (or an ancestor) now exceeds on these models."""
        out = []
        for model in models:
            for holder in self.lineage.get(team, (team,)):
                limit = self.limits.get((holder, model))
                if limit is None:
                    continue
                held = sum(
                    v for (t, m), v in self.held.items() if m == model and holder in self.lineage.get(t, (t,))
                )
                if held > limit + 1e-6:
                    out.append(f"team {holder} holds {held:g} {model} GPUs, limit {limit:g}")
        return out

    def may_reclaim(self, team: str, need: float, free: float) -> bool:
        """True when ``team`` holds less than its guarantee of some model, by enough that ``need`` GPUs
        fit in the unused guarantee plus ``free`` GPUs (a necessary condition for a reclaim)."""
        for model, guaranteed in self.guaranteed.get(team, {}).items():
            headroom = guaranteed - self.held.get((team, model), 0.0)
            if headroom > _EPS and need <= headroom + free + _EPS:
                return True
        return False


def _lineage(team: str, parents: dict[str, str | None]) -> tuple[str, ...]:
    """``team`` and its ancestors, nearest first (cycles in the tree are cut)."""
    out = [team]
    parent = parents.get(team)
    while parent is not None and parent not in out:
        out.append(parent)
        parent = parents.get(parent)
    return tuple(out)
