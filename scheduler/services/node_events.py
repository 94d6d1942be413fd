"""A node's job events (docs/node-protocol.md): ``node_event_apply`` applies any one of them, a checkpoint
included; ``node_job_events`` applies many of one node in one request (``POST /api/v1/node/events/``).

Both endpoints, the single event's and the batch's, judge and apply an event the same way: a checkpoint through
``node_job_checkpoint``, every other event through ``scheduler.services.node_event_batch`` (the single event as
a batch of one). A batch is applied in one transaction, in the order the node sent it, each event answered as if
it came alone, and the cycle is woken once for the batch when an attempt ended, not once per event. A node
turning over short jobs sends its starts and exits together this way: one request, one authentication, one
transaction and one wake-up instead of one each.
"""

from __future__ import annotations

from scheduler.models import Node
from scheduler.services.checkpoints import node_job_checkpoint
from scheduler.services.node_event_batch import checkpoint_answer, node_events_apply
from scheduler.services.node_jobs import node_job_event
from scheduler.services.nodes import NodeProtocolError

MAX_EVENTS = 256  # per request; an agent with more sends them in several


def node_event_apply(*, node: Node, job_id: int, event: dict, wake: bool = True) -> dict:
    """Apply one job event of ``node`` (``started``, ``exited``, ``stopped``, ``start_failed`` or
    ``checkpoint``); returns ``{"job_id", "state"}`` (a checkpoint adds ``recorded`` and the job's
    ``last_checkpoint_at``). Raises NodeProtocolError for a refused one. An attempt's end wakes the cycle
    unless ``wake`` is false."""
    if event["type"] == "checkpoint":  # the job's checkpoint file changed: scheduler/services/checkpoints.py
        return checkpoint_answer(*node_job_checkpoint(node=node, job_id=job_id, event=event))
    job = node_job_event(node=node, job_id=job_id, event=event, wake=wake)
    return {"job_id": job.pk, "state": job.state}


def node_job_events(*, node: Node, events: list[dict]) -> list[dict]:
    """Apply ``events`` (each an event body with its ``job_id``) in order; one result per event: what
    ``node_event_apply`` answers when it was accepted, ``{"job_id", "status", "detail"[, "field"]}`` when it
    was refused (the status and detail the single-event endpoint answers)."""
    results = node_events_apply(node=node, events=events).results
    return [_refusal(event["job_id"], result) if isinstance(result, NodeProtocolError) else result
            for event, result in zip(events, results, strict=True)]


def _refusal(job_id: int, exc: NodeProtocolError) -> dict:
    return {"job_id": job_id, "status": exc.status, "detail": str(exc), **({"field": exc.field} if exc.field else {})}
