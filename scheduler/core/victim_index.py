"""Possible preemption victims, sorted once per session, and the candidates for one waiting job.

Two plugins name victims (see ``preemption``): the priority plugin (a lower-priority job of the same team,
or of any team with cluster scope) and the quota plugin's reclaim (a job of a team borrowing the model,
once it has run its minimum time and two cycle intervals). Both lists are in victim preference order
(borrowed first, lowest priority, most recent start, least work since the last checkpoint); a plan looks at
the first ``PLAN_LIMIT`` of them merged, plus those on the nodes with the most free devices and the jobs
holding the most devices (where small victim sets are).
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from scheduler.core.cluster import EPS, Group
from scheduler.core.preemption import (
    BIG_JOBS,
    NEAR_NODES,
    PLAN_LIMIT,
    PRIORITY,
    RECLAIM,
    Running,
    eligible,
    reclaimable_at,
    req_devices,
    victim_order,
)
from scheduler.core.types import JobInfo

if TYPE_CHECKING:
    from scheduler.core.session import Session

Candidate = tuple[tuple, Running, str]  # (preference key, running job, rule)


def _first(item: tuple) -> tuple:
    return item[0]


class VictimIndex:
    """Eligible running jobs per model (reclaim) and per (team or None, model) (priority), best first."""

    def __init__(self, s: Session) -> None:
        quota, now, classes, taken = s.quota, s.now, s.classes, s.statement.victims
        self.session = s
        self.cluster_scope = s.policy.preemption_scope == "cluster"
        self.pref_team: dict[tuple[str | None, str], list] = {}
        self.pref_model: dict[str, list] = {}
        self.pref_start: dict[str, int] = defaultdict(int)
        self.team_key: dict[int, tuple] = {}  # job id -> its key in its priority list
        self.model_key: dict[int, tuple] = {}  # job id -> its key in its model's (reclaim) list
        self.on_node: dict[str, list[Running]] | None = None  # built on first use (see _extra)
        self.biggest: dict[str, list[Running]] = {}  # likewise, per model
        # Per (model, pool): how many possible reclaim victims each team still has (victims leave it).
        self.lenders: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.lender_ids: set[int] = set()
        interval = s.cycle_interval_s
        for model, recs in s.running_by_model.items():
            ok = []
            for r in recs:
                if eligible(r, classes, now, taken):
                    ok.append((victim_order(r, True, now), r))
            ok.sort(key=_first)
            self.pref_model[model] = ok
            by_team: dict[str | None, list] = defaultdict(list)
            for k, r in ok:
                jid = r.job.id
                at = reclaimable_at(r.job, classes, interval)
                if at is None or at <= now + EPS:  # a possible reclaim victim
                    self.model_key[jid] = k
                    self.lenders[(model, r.pool)][r.job.team] += 1
                    self.lender_ids.add(jid)
                by_team[None if self.cluster_scope else r.job.team].append((k, r))
            for team, items in by_team.items():
                if team is None:  # cluster scope: each job with its own team's flag, in ascending
                    # priority (the early stops in candidates rely on it), borrowed first within one
                    items = sorted(((self._flagged(k, r.job.team, model), r) for k, r in items),
                                   key=lambda kr: (kr[0][1], kr[0]))
                elif quota.borrowed(team, model) <= EPS:  # the model's keys say "borrowed" (0)
                    items = [((1,) + k[1:], r) for k, r in items]
                self.pref_team[(team, model)] = items
                for k, r in items:
                    self.team_key[r.job.id] = k

    def leave(self, rec: Running) -> None:
        """``rec`` became a victim: its team has one possible reclaim victim fewer."""
        if rec.job.id in self.lender_ids:
            self.lenders[(rec.model, rec.pool)][rec.job.team] -= 1

    def come_back(self, rec: Running) -> None:
        """Undo ``leave`` (a discarded statement)."""
        if rec.job.id in self.lender_ids:
            self.lenders[(rec.model, rec.pool)][rec.job.team] += 1

    def _flagged(self, key: tuple, team: str, model: str) -> tuple:
        """A model-list key (flagged "borrowed") with the team's real flag."""
        return key if self.session.quota.borrowed(team, model) > EPS else (1,) + key[1:]

    def scope_of(self, job: JobInfo) -> str | None:
        """The key of the victim list ``job`` may preempt by priority: its team's, or everyone's (None)."""
        return None if self.cluster_scope else job.team

    def has_candidates(self, job: JobInfo, group: Group, reclaim: bool) -> bool:
        """Whether ``candidates`` would yield anything (most waiting jobs have no victim at all: answer that
        without walking every running job of the model)."""
        taken = self.session.statement.victims
        pool = group.pool
        for _key, rec in self.pref_team.get((self.scope_of(job), group.model), ()):
            if rec.job.priority >= job.priority:
                break
            if rec.pool == pool and rec.job.id not in taken:
                return True
        if not reclaim:
            return False
        model = group.model
        lendable = self.session.quota.lendable
        for team, count in self.lenders[(model, pool)].items():
            if count and team != job.team and lendable(team, model) > EPS:
                return True
        return False

    def candidates(self, job: JobInfo, group: Group, reclaim: bool, room: dict[str, float],
                   limit: int = PLAN_LIMIT) -> list[Candidate]:
        """The first ``limit`` victim candidates for ``job`` in ``group``, best first (both rules merged).

        Fills ``room`` with what reclaim may take from each other team (nothing changes while a plan is
        made, so it is known up front)."""
        s = self.session
        taken = s.statement.victims
        pool = group.pool
        out: list[Candidate] = []
        # One team's list has one "borrowed" flag, so it is in ascending priority: stop at the first job
        # that is not of lower priority.
        for key, rec in self.pref_team.get((self.scope_of(job), group.model), ()):
            if rec.job.priority >= job.priority or len(out) >= limit:
                break
            if rec.pool == pool and rec.job.id not in taken:
                out.append((key, rec, PRIORITY))
        if not reclaim:
            near = self._extra(job, group, False, set(), {c[1].job.id for c in out})
            return sorted(out + near, key=_first) if near else out
        for team in self.lenders[(group.model, pool)]:
            if team != job.team:
                room[team] = s.quota.lendable(team, group.model)
        lenders = {team for team, left in room.items() if left > EPS}
        order = self.pref_model.get(group.model, ())
        start = self.pref_start[group.model]
        while start < len(order) and order[start][1].job.id in taken:
            start += 1
        self.pref_start[group.model] = start
        reclaim_out = []
        # With cluster scope a lower-priority job of a lender may already be a priority candidate.
        as_priority = {c[1].job.id for c in out} if out else ()
        if lenders:
            for i in range(start, len(order)):
                key, rec = order[i]
                if (rec.job.team in lenders and rec.pool == pool and rec.job.id not in taken
                        and rec.job.id not in as_priority and rec.job.id in self.model_key):
                    reclaim_out.append((key, rec, RECLAIM))
                    if len(reclaim_out) >= limit:
                        break
        # Keys are unique (they end with the job id), so sorting merges the two ordered lists.
        merged = sorted(out + reclaim_out, key=_first)[:limit] if out else reclaim_out
        near = self._extra(job, group, reclaim, lenders, {c[1].job.id for c in merged})
        return sorted(merged + near, key=_first) if near else merged

    def _extra(self, job: JobInfo, group: Group, reclaim: bool, lenders: set[str], seen: set[int]) -> list[Candidate]:
        """Victim candidates beyond the first ``PLAN_LIMIT`` by preference, where the smallest victim set
        often is: on the group's nodes with the most free devices (a nearly free node whose one job is old,
        so preferred last), and the jobs holding the most devices (one victim can free a whole node).
        Without them a team under its guarantee could wait for hours behind a spread of recent small jobs
        it cannot combine into a node."""
        s = self.session
        out: list[Candidate] = []
        scope = self.scope_of(job)
        taken = s.statement.victims
        team_key, model_key = self.team_key, self.model_key
        pool = group.pool

        def consider(rec: Running) -> None:
            jid = rec.job.id
            if jid in seen or jid in taken or rec.pool != pool:
                return
            team = rec.job.team
            if (scope is None or team == scope) and rec.job.priority < job.priority and jid in team_key:
                out.append((team_key[jid], rec, PRIORITY))
                seen.add(jid)
            elif reclaim and team in lenders and team != job.team and jid in model_key:
                out.append((model_key[jid], rec, RECLAIM))
                seen.add(jid)

        on_node = self.on_node
        if on_node is None:
            on_node = self.on_node = defaultdict(list)
            for order in self.pref_model.values():
                for _k, rec in order:
                    for name in rec.nodes:
                        on_node[name].append(rec)
        buckets = group.buckets
        nodes = s.cluster.node_by_order
        looked = 0
        for k in range(len(buckets) - 1, 0, -1):
            for node_order in buckets[k]:
                if looked >= NEAR_NODES:
                    break
                looked += 1
                for rec in on_node.get(nodes[node_order].name, ()):
                    consider(rec)
        if req_devices(job) > 1:
            biggest = self.biggest.get(group.model)
            if biggest is None:
                ranked = sorted((kr for kr in self.pref_model.get(group.model, ()) if len(kr[1].shares) > 1),
                                key=lambda kr: (-len(kr[1].shares), kr[0]))
                biggest = self.biggest[group.model] = [r for _k, r in ranked]
            found = len(out)
            for n, rec in enumerate(biggest):
                if n >= 4 * BIG_JOBS or len(out) - found >= BIG_JOBS:
                    break
                consider(rec)
        return out
