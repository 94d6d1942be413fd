"""Signals other apps listen to (the scheduler knows none of them)."""

from django.dispatch import Signal

# Sent inside the transaction that recorded a job's transition, with ``transition`` (a JobTransition).
# Receivers must not block: they enqueue work for after the commit (notifications does).
job_transitioned = Signal()
