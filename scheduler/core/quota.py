"""Quota book-keeping for one cycle: what each team (and each of its ancestors) holds per GPU model.

Rows are ``QuotaInfo`` keyed by (team, model, pool); a row with ``pool=None`` covers every pool. A team
may use a model in a pool only when it has a row for (model, pool) or (model, any pool). Limits cap the
team's holdings (borrowing included) and, for a parent team, the sum held by its whole subtree. Amounts
are GPUs and count fractions (a 0.25 share counts 0.25).
"""

from __future__ import annotations

from collections import defaultdict

from scheduler.core import reasons as R
from scheduler.core.cluster import EPS
from scheduler.core.types import QuotaInfo, Reason, Snapshot

QuotaKey = tuple[str, str, str | None]  # (team, gpu model, pool or None for "any pool")


class QuotaBook:
    """Rows, usage and limit checks. ``used`` counts running jobs plus this cycle's starts."""

    def __init__(self, snapshot: Snapshot, pool_of_device: dict[int, str], model_of_device: dict[int, str]):
        self.rows: dict[QuotaKey, QuotaInfo] = {}
        for q in snapshot.quotas:
            self.rows[(q.team, q.gpu_model, q.pool)] = q
        parent = {t.name: t.parent for t in snapshot.teams}
        self.ancestors: dict[str, tuple[str, ...]] = {}
        for name in parent:
            self.ancestors[name] = _ancestors(name, parent)
        self.used: dict[QuotaKey, float] = defaultdict(float)
        self.models_of_team: dict[str, set[str]] = defaultdict(set)
        for team, model, _pool in self.rows:
            self.models_of_team[team].add(model)
        for job in snapshot.jobs:
            for p in job.placements:
                model = model_of_device.get(p.gpu_id)
                if model is not None:
                    self.charge(job.team, model, pool_of_device[p.gpu_id], p.share)

    def lineage(self, team: str) -> tuple[str, ...]:
        """The team followed by its ancestors, nearest first."""
        return (team,) + self.ancestors.get(team, ())

    def row(self, team: str, model: str, pool: str) -> QuotaInfo | None:
        """The team's own row for ``model`` in ``pool``: the pool-specific one, else the any-pool one."""
        return self.rows.get((team, model, pool)) or self.rows.get((team, model, None))

    def held(self, team: str, model: str, pool: str | None) -> float:
        """GPUs of ``model`` the team's subtree holds, in ``pool`` (or in all pools for None)."""
        return self.used.get((team, model, pool), 0.0)

    def charge(self, team: str, model: str, pool: str, amount: float) -> None:
        """Add ``amount`` GPUs held by ``team`` (and its ancestors) of ``model`` in ``pool``."""
        used = self.used
        for t in self.lineage(team):
            used[(t, model, None)] += amount
            used[(t, model, pool)] += amount

    def check_limit(self, team: str, model: str, pool: str, amount: float) -> Reason | None:
        """None when ``team`` may take ``amount`` more of ``model`` in ``pool``; else why not.

        QuotaExceeded: the team has no row for the model, or its own limit would be passed.
        OverLimit: a parent team's limit would be passed.
        """
        own = self.row(team, model, pool)
        if own is None:
            return R.reason(
                R.QUOTA_EXCEEDED,
                f"team {team} has no quota for {model} (limit 0); job needs {R.fmt_gpus(amount)}",
                team=team, gpu_model=model, in_use=0, limit=0, requested=R.num(amount),
            )
        for t in self.lineage(team):
            for scope in (None, pool):
                row = self.rows.get((t, model, scope))
                if row is None or row.limit is None:
                    continue
                in_use = self.used.get((t, model, scope), 0.0)
                if in_use + amount > row.limit + EPS:
                    code = R.QUOTA_EXCEEDED if t == team else R.OVER_LIMIT
                    who = f"team {t}" if t == team else f"parent team {t} of {team}"
                    where = f" in pool {scope}" if scope else ""
                    return R.reason(
                        code,
                        f"{who} holds {R.fmt_gpus(in_use)}/{R.fmt_gpus(row.limit)} {model}{where} "
                        f"(limit {R.fmt_gpus(row.limit)}); job needs {R.fmt_gpus(amount)}",
                        team=t, gpu_model=model, in_use=R.num(in_use), limit=R.num(row.limit), requested=R.num(amount),
                        **({"pool": scope} if scope else {}),
                    )
        return None


def _ancestors(name: str, parent: dict[str, str | None]) -> tuple[str, ...]:
    """Ancestors of ``name`` nearest first; a cycle in the tree stops the walk."""
    out: list[str] = []
    seen = {name}
    cur = parent.get(name)
    while cur is not None and cur not in seen:
        out.append(cur)
        seen.add(cur)
        cur = parent.get(cur)
    return tuple(out)
