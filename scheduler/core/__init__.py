"""Rota's pure scheduling engine: a Snapshot goes in, Decisions come out. No Django, clock or I/O.

``schedule(snapshot)`` runs one cycle; ``check_invariants(snapshot, decisions)`` lists any rule the
decisions break (empty list: all good). Reason codes live in ``scheduler.core.reasons``.
"""

from scheduler.core.engine import schedule
from scheduler.core.invariants import check_invariants

__all__ = ["check_invariants", "schedule"]
