"""Signals other apps listen to (the scheduler knows none of them)."""

from django.dispatch import Signal

# Sent inside the transaction that recorded jobs' transitions, with ``transitions`` (a list of JobTransition: one
# for a single move, many for those recorded together, a heartbeat's deliveries or a batch of a node's events).
# Receivers must not block: they enqueue work for after the commit (notifications does, asking once for them all).
jobs_transitioned = Signal()
