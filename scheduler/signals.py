"""Signals other apps listen to (the scheduler knows none of them)."""

from django.dispatch import Signal

# Sent inside the transaction that recorded a job's transition, with ``transition`` (a JobTransition).
# Receivers must not block: they enqueue work for after the commit (notifications does).
job_transitioned = Signal()
# The same for many transitions recorded together (a batch of a node's job events), with ``transitions`` (a list
# of JobTransition): a receiver may treat them together (notifications asks once who could be told of them).
jobs_transitioned = Signal()
