"""Rota's pure scheduling engine: a Snapshot goes in, Decisions come out. No Django, clock or I/O.

``schedule(snapshot)`` runs one cycle; ``check_invariants(snapshot, decisions)`` lists any rule the
decisions break (empty list: all good). Reason codes live in ``scheduler.core.reasons``.

Reading order: ``engine`` (``schedule()``: the actions in order) → ``session`` (the cycle's working copy)
→ ``actions/`` (admit, reclaim, preempt, backfill, estimate: each reads as its policy) → ``plugins/``
(priority, fairshare, quota, placement, gang, sharing, kinds) → ``statement`` (the only writer, commit and
discard). Below them: ``cluster`` (devices and free-capacity buckets), ``quota`` (the quota book),
``timeline`` (releases and reservations), ``placement`` and ``feasibility`` (static filters and node
search), ``topology`` (switches and NVLink domains from node labels: where a gang lands), ``preemption``
and ``victim_index`` (victim rules and plans), ``stopping`` (devices of stopping jobs), ``memo`` (per-cycle
look-up tables).
"""

from scheduler.core.engine import schedule
from scheduler.core.invariants import check_invariants

__all__ = ["check_invariants", "schedule"]
