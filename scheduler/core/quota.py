"""Quota book-keeping for one cycle: what each team (and each of its ancestors) holds per GPU model.

Rows are ``QuotaInfo`` keyed by (team, model, pool); a row with ``pool=None`` covers every pool. A team
may use a model in a pool only when it has a row for (model, pool) or (model, any pool). Limits cap the
team's holdings (borrowing included) and, for a parent team, the sum held by its whole subtree. Amounts
are GPUs and count fractions (a 0.25 share counts 0.25).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable

from scheduler.core import reasons as R
from scheduler.core.cluster import EPS, Held
from scheduler.core.types import QuotaInfo, Reason, Snapshot

_reason = R.reasoner("quota")  # reasons of the quota plugin

QuotaKey = tuple[str, str, str | None]  # (team, gpu model, pool or None for "any pool")


class QuotaBook:
    """Rows, usage and limit checks. ``used`` counts running jobs plus this cycle's starts."""

    def __init__(self, snapshot: Snapshot, held: Iterable[Held]):
        # Rows, the team tree and per (team, model) sums of guarantees, never-lent parts and weights.
        (self.rows, self.ancestors, self.models_of_team, self.guaranteed, self.non_lendable,
         self.weight) = _rows_and_sums(snapshot.quotas, snapshot.teams)
        self.used: dict[QuotaKey, float] = defaultdict(float)
        self.version: dict[str, int] = defaultdict(int)  # per model: bumped on every charge of it
        self.charges = 0  # bumped on every charge (of any model)
        self.non_preemptible: dict[tuple[str, str], float] = defaultdict(float)
        self.borrow_cap: dict[tuple[str, str], float] = {}  # set by plan_borrowing
        self.borrowable: dict[str, float] = {}
        self.unmet_term: dict[tuple[str, str], float] = {}
        self.unmet_total: dict[str, float] = defaultdict(float)
        self.leaving: dict[tuple[str, str], float] = defaultdict(float)
        self._limits: dict[QuotaKey, tuple] = {}  # (team, model, pool) -> _limit_rows(...)
        totals: dict[tuple[str, str, str], float] = defaultdict(float)  # one charge per team, model, pool
        for h in held:
            job = h.job
            for (pool, model), amount in h.amounts.items():
                totals[(job.team, model, pool)] += amount
                if not job.preemptible:
                    self.non_preemptible[(job.team, model)] += amount
        for (team, model, pool), amount in totals.items():
            self.charge(team, model, pool, amount)

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
        self.version[model] += 1
        self.charges += 1
        for t in self.lineage(team):
            used[(t, model, None)] += amount
            used[(t, model, pool)] += amount
        if (team, model) in self.unmet_term:
            self._update_unmet(team, model)

    def _update_unmet(self, team: str, model: str) -> None:
        """Keep ``unmet_total`` (what borrowers still lack to reach their whole weighted share) current."""
        new = max(0.0, math.floor(self.borrow_cap[(team, model)] + EPS) - self.borrowed(team, model))
        self.unmet_total[model] += new - self.unmet_term[(team, model)]
        self.unmet_term[(team, model)] = new

    def release(self, team: str, model: str, amount: float) -> None:
        """Note that ``amount`` of the team's GPUs are being preempted (they still count as held)."""
        self.leaving[(team, model)] += amount

    def lendable(self, team: str, model: str) -> float:
        """What reclaim may still take from ``team``: its borrowing not already being preempted."""
        g = self.guaranteed.get((team, model), 0.0)
        return max(0.0, self.team_used(team, model) - self.leaving.get((team, model), 0.0) - g)

    def within_guarantee(self, team: str, model: str, amount: float) -> bool:
        """Whether ``amount`` more of ``model`` keeps ``team`` inside its guarantee."""
        return self.used.get((team, model, None), 0.0) + amount <= self.guaranteed.get((team, model), 0.0) + EPS

    def team_used(self, team: str, model: str) -> float:
        """GPUs of ``model`` the team (with its subtree) holds in all pools."""
        return self.used.get((team, model, None), 0.0)

    def borrowed(self, team: str, model: str) -> float:
        """GPUs the team holds above its guarantee of ``model``."""
        return max(0.0, self.team_used(team, model) - self.guaranteed.get((team, model), 0.0))

    def reserved_for_others(self, team: str, model: str, teams: list[str]) -> float:
        """Unused never-lent guarantee of every other team: capacity ``team`` may not borrow."""
        total = 0.0
        for other in teams:
            if other != team:
                nl = self.non_lendable.get((other, model), 0.0)
                if nl > 0:
                    total += max(0.0, nl - self.team_used(other, model))
        return total

    def plan_borrowing(self, free_of_model: dict[str, float], borrowers: dict[str, set[str]]) -> None:
        """Split each model's borrowable capacity among teams that want to borrow it, by weight.

        ``free_of_model``: idle healthy capacity per model now; ``borrowers``: per model, the teams that
        borrow it already or have waiting work that would borrow it. With one borrower there is no cap.
        """
        for model, teams in borrowers.items():
            if len(teams) < 2:
                continue
            held = sum(self.borrowed(t, model) for t in teams)
            pool = free_of_model.get(model, 0.0) + held
            weights = {t: max(self.weight.get((t, model), 1.0), 0.0) for t in teams}
            total = sum(weights.values()) or 1.0
            self.borrowable[model] = pool
            for t in sorted(teams):
                self.borrow_cap[(t, model)] = pool * weights[t] / total
                self.unmet_term[(t, model)] = 0.0
                self._update_unmet(t, model)

    def check_guarantee(self, team: str, model: str, amount: float, preemptible: bool, borrowing: bool,
                        free_of_model: float, nl_teams: list[str], credit: float = 0.0) -> Reason | None:
        """Rules on top of limits: non-preemptible work stays within the guarantee; borrowing (going
        above the guarantee) needs the policy to allow it, leaves others' never-lent parts alone and
        stays within the team's weighted share of borrowable capacity."""
        g = self.guaranteed.get((team, model), 0.0)
        if not preemptible:
            np_used = self.non_preemptible.get((team, model), 0.0)
            if np_used + amount > g + EPS:
                never = amount > g + EPS  # larger than the whole guarantee: waiting cannot help
                return _reason(
                    R.NON_PREEMPTIBLE_OVER_QUOTA,
                    f"team {team} runs {R.fmt_gpus(np_used)} non-preemptible {model} of its "
                    f"{R.fmt_gpus(g)} guaranteed; job needs {R.fmt_gpus(amount)} (non-preemptible work must "
                    "fit in guaranteed quota)"
                    + ("; it cannot start unless the guarantee is raised or it is made preemptible" if never else ""),
                    team=team, gpu_model=model, in_use=R.num(np_used), guaranteed=R.num(g),
                    requested=R.num(amount), never=never)
        used = self.team_used(team, model) - credit
        after = used + amount - g
        if after <= EPS:
            return None
        if not borrowing:
            return _reason(
                R.QUOTA_EXCEEDED,
                f"team {team} holds {R.fmt_gpus(used)}/{R.fmt_gpus(g)} {model} (guaranteed {R.fmt_gpus(g)}, "
                f"borrowing off); job needs {R.fmt_gpus(amount)}",
                team=team, gpu_model=model, in_use=R.num(used), limit=R.num(g), requested=R.num(amount))
        if nl_teams:
            reserved = self.reserved_for_others(team, model, nl_teams)
            if reserved > 0 and free_of_model - amount < reserved - EPS:
                return _reason(
                    R.RESOURCES,
                    f"{R.fmt_gpus(free_of_model)} {model} are idle but {R.fmt_gpus(reserved)} are kept for "
                    f"their owners (never lent); job needs {R.fmt_gpus(amount)} above team {team}'s guarantee",
                    gpu_model=model, free=R.num(free_of_model), reserved=R.num(reserved), requested=R.num(amount))
        cap = self.borrow_cap.get((team, model))
        if cap is not None and after > cap + EPS and free_of_model >= amount - EPS:
            # Beyond its weighted share a team may still borrow what the other borrowers cannot claim:
            # it must leave idle what they lack to reach their own (whole-GPU) shares.
            unmet = self.unmet_total[model] - self.unmet_term.get((team, model), 0.0)
            if free_of_model - amount < unmet - EPS:
                return _reason(
                    R.OVER_LIMIT,
                    f"team {team} would borrow {R.fmt_gpus(after)} {model} above its guarantee; its weighted "
                    f"share of {R.fmt_gpus(self.borrowable.get(model, 0.0))} borrowable is {R.fmt_gpus(cap)} "
                    f"and other borrowers wait for {R.fmt_gpus(unmet)}",
                    team=team, gpu_model=model, borrowed=R.num(max(after - amount, 0.0)), share=R.num(cap),
                    requested=R.num(amount), others_waiting=R.num(unmet))
        return None

    def check_limit(self, team: str, model: str, pool: str, amount: float, credit: float = 0.0) -> Reason | None:
        """None when ``team`` may take ``amount`` more of ``model`` in ``pool``; else why not.

        QuotaExceeded: the team has no row for the model, or its own limit would be passed.
        OverLimit: a parent team's limit would be passed.
        ``credit``: GPUs of this model the team's own victims will give back (same pool).
        """
        limits = self._limits.get((team, model, pool))
        if limits is None:
            limits = self._limits[(team, model, pool)] = self._limit_rows(team, model, pool)
        if not limits[0]:
            return _reason(
                R.QUOTA_EXCEEDED,
                f"team {team} has no quota for {model} (limit 0); job needs {R.fmt_gpus(amount)}",
                team=team, gpu_model=model, in_use=0, limit=0, requested=R.num(amount),
            )
        used = self.used
        for key, cap, row in limits[1]:
            in_use = used.get(key, 0.0) - credit
            if in_use + amount > cap:
                t, _model, scope = key
                code = R.QUOTA_EXCEEDED if t == team else R.OVER_LIMIT
                who = f"team {t}" if t == team else f"parent team {t} of {team}"
                where = f" in pool {scope}" if scope else ""
                never = "; more than the limit: it cannot start unless the limit is raised" if amount > cap else ""
                return _reason(
                    code,
                    f"{who} holds {R.fmt_gpus(in_use)}/{R.fmt_gpus(row.limit)} {model}{where} "
                    f"(limit {R.fmt_gpus(row.limit)}); job needs {R.fmt_gpus(amount)}{never}",
                    team=t, gpu_model=model, in_use=R.num(in_use), limit=R.num(row.limit), requested=R.num(amount),
                    **({"pool": scope} if scope else {}),
                )
        return None

    def _limit_rows(self, team: str, model: str, pool: str) -> tuple[bool, tuple]:
        """Whether the team has a row for ``model`` in ``pool``, and the rows with a limit that
        ``check_limit`` walks (the team's and its ancestors', any-pool before the pool's): (usage key,
        limit + EPS, row)."""
        rows = []
        for t in self.lineage(team):
            for scope in (None, pool):
                row = self.rows.get((t, model, scope))
                if row is not None and row.limit is not None:
                    rows.append(((t, model, scope), row.limit + EPS, row))
        return self.row(team, model, pool) is not None, tuple(rows)


def _rows_and_sums(quotas: tuple[QuotaInfo, ...], teams: tuple) -> tuple:
    """``QuotaBook``'s read-only part: rows by (team, model, pool), ancestors, and per (team, model) the
    models of each team, guarantees, never-lent parts and weights."""
    rows: dict[QuotaKey, QuotaInfo] = {}
    for q in quotas:
        rows[(q.team, q.gpu_model, q.pool)] = q
    parent = {t.name: t.parent for t in teams}
    ancestors = {name: _ancestors(name, parent) for name in parent}
    models_of_team: dict[str, set[str]] = defaultdict(set)
    guaranteed: dict[tuple[str, str], float] = defaultdict(float)
    non_lendable: dict[tuple[str, str], float] = defaultdict(float)
    weight: dict[tuple[str, str], float] = {}
    for (team, model, _pool), q in sorted(rows.items(), key=lambda kv: str(kv[0])):
        models_of_team[team].add(model)
        guaranteed[(team, model)] += max(q.guaranteed, 0.0)
        non_lendable[(team, model)] += min(max(q.non_lendable, 0.0), max(q.guaranteed, 0.0))
        weight[(team, model)] = max(weight.get((team, model), 0.0), q.weight)
    # Plain dicts from here on: readers use .get, and a look-up of a missing key must not add it.
    return rows, ancestors, dict(models_of_team), dict(guaranteed), dict(non_lendable), weight


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
