"""Per-team time integrals the simulator keeps while it replays: decayed usage, share, starvation.

Everything is integrated exactly between state changes (GPUs held change only at starts, completions
and stops), so results do not depend on how often the scheduler cycles.
"""

from __future__ import annotations

import math

_EPS = 1e-9


class TeamLedger:
    """Integrals over time for each team.

    usage: GPU-seconds decayed with ``half_life_s`` (what ``Snapshot.usage`` carries for fair share).
    contended_gpu_s: GPU-seconds held while some job was waiting (the "received share" when it matters);
      a job counts as waiting once a scheduling cycle has left it in the queue.
    starved_s: seconds during which the team had a pending job that would fit in what is left of its
      guarantee (guaranteed - held >= request) and yet did not run.
    longest_starved_s: the longest such stretch without a break (see ``longest_starved``): how long the
      team waited, at worst, to reach its guarantee (cycle interval, victims' minimum runtime and grace
      period included).
    """

    def __init__(self, teams: list[str], guaranteed: dict[str, float], half_life_s: float) -> None:
        self.teams = list(teams)
        self.guaranteed = {t: guaranteed.get(t, 0.0) for t in self.teams}
        self.rate = math.log(2) / half_life_s if half_life_s > 0 else 0.0
        self.held = dict.fromkeys(self.teams, 0.0)
        self.usage = dict.fromkeys(self.teams, 0.0)
        self.contended_gpu_s = dict.fromkeys(self.teams, 0.0)
        self.starved_s = dict.fromkeys(self.teams, 0.0)
        self.pending_requests: dict[str, dict[float, int]] = {t: {} for t in self.teams}
        self.starving = dict.fromkeys(self.teams, False)
        self.starved_since: dict[str, float] = {}
        self.longest_starved_s = dict.fromkeys(self.teams, 0.0)
        self.last = dict.fromkeys(self.teams, 0.0)
        self.contended = False
        self.waiting = 0

    def advance(self, team: str, now: float) -> None:
        """Integrate ``team``'s state from its last update up to ``now``."""
        dt = now - self.last[team]
        if dt <= 0:
            return
        self.last[team] = now
        held = self.held[team]
        if self.rate:
            decay = math.exp(-self.rate * dt)
            self.usage[team] = self.usage[team] * decay + held * (1.0 - decay) / self.rate
        else:
            self.usage[team] += held * dt
        if self.contended:
            self.contended_gpu_s[team] += held * dt
        if self.starving[team]:
            self.starved_s[team] += dt

    def advance_all(self, now: float) -> None:
        """Integrate every team up to ``now``."""
        for team in self.teams:
            self.advance(team, now)

    def change_held(self, team: str, now: float, delta: float) -> None:
        """``team`` starts (+) or stops (-) holding ``delta`` GPUs at ``now``."""
        self.advance(team, now)
        self.held[team] += delta
        if -_EPS < self.held[team] < _EPS:
            self.held[team] = 0.0
        self._update_starving(team)

    def change_pending(self, team: str, now: float, request: float, delta: int) -> None:
        """A job of ``team`` asking for ``request`` GPUs starts (+1) or stops (-1) waiting at ``now``."""
        self.waiting += delta
        if (self.waiting > 0) != self.contended:
            self.advance_all(now)
            self.contended = self.waiting > 0
        self.advance(team, now)
        requests = self.pending_requests[team]
        count = requests.get(request, 0) + delta
        if count:
            requests[request] = count
        else:
            requests.pop(request, None)
        self._update_starving(team)

    def _update_starving(self, team: str) -> None:
        """Starving: a waiting job would fit in the unused part of the team's guarantee."""
        requests = self.pending_requests[team]
        headroom = self.guaranteed[team] - self.held[team]
        starving = bool(requests) and min(requests) <= headroom + _EPS
        if starving != self.starving[team]:
            now = self.last[team]  # the caller has just advanced the team to now
            if starving:
                self.starved_since[team] = now
            else:
                since = self.starved_since.pop(team)
                self.longest_starved_s[team] = max(self.longest_starved_s[team], now - since)
        self.starving[team] = starving

    def longest_starved(self, team: str, end: float) -> float:
        """The team's longest stretch of starvation, a stretch still open at ``end`` included."""
        since = self.starved_since.get(team)
        open_s = end - since if since is not None else 0.0
        return max(self.longest_starved_s[team], open_s)

    def usage_at(self, now: float) -> dict[str, float]:
        """Decayed GPU-seconds per team at ``now`` (for ``Snapshot.usage``)."""
        self.advance_all(now)
        return dict(self.usage)
