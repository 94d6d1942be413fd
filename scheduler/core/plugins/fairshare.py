"""Fair-share plugin: inside a priority, the team that used least of its entitlement goes first.

A team's entitlement is the sum of its guaranteed GPUs (else of its quota weights); its factor is its
decayed usage (GPU-seconds, ``snapshot.usage``) divided by that. Used by the priority plugin's queue order
when the policy's ordering is ``fairshare``, and by the portal's fairness statement.
"""

from __future__ import annotations

from scheduler.core.types import Snapshot

NAME = "fairshare"


def entitlements(snapshot: Snapshot) -> dict[str, float]:
    """Each team's entitlement: the sum of its guaranteed GPUs, else the sum of its quota weights."""
    guaranteed: dict[str, float] = {}
    weight: dict[str, float] = {}
    for q in snapshot.quotas:
        guaranteed[q.team] = guaranteed.get(q.team, 0.0) + max(q.guaranteed, 0.0)
        weight[q.team] = weight.get(q.team, 0.0) + max(q.weight, 0.0)
    out = {}
    for team in set(guaranteed) | set(weight):
        out[team] = guaranteed.get(team, 0.0) or weight.get(team, 0.0)
    return out


def fair_share_factors(snapshot: Snapshot) -> dict[str, float]:
    """Decayed usage (GPU-seconds, from ``snapshot.usage``) divided by entitlement; lower runs first.

    A team without entitlement but with usage sorts after every entitled team of equal usage. Teams with
    neither are left out: their factor is 0, the sort key's default.
    """
    ent = entitlements(snapshot)
    out = {}
    for team in set(ent) | set(snapshot.usage):
        usage = max(float(snapshot.usage.get(team, 0.0)), 0.0)
        e = ent.get(team, 0.0)
        out[team] = usage / e if e > 0 else (usage * 1e6 if usage else 0.0)
    return out
