"""Many job events of one node in one request (``POST /api/v1/node/events/``, docs/node-protocol.md).

Each event is judged and applied exactly as ``node_job_event`` applies one (its own transaction, the same
answers), in the order the node sent them; the cycle is woken once for the batch when an attempt ended, not
once per event. A node turning over short jobs sends its starts and exits together this way: one request,
one authentication and one wake-up instead of one each.
"""

from __future__ import annotations

from scheduler.models import Node
from scheduler.services.checkpoints import node_job_checkpoint
from scheduler.services.jobs import wake_cycle
from scheduler.services.nodes import NodeProtocolError, node_job_event

MAX_EVENTS = 256  # per request; an agent with more sends them in several


def node_job_events(*, node: Node, events: list[dict]) -> list[dict]:
    """Apply ``events`` (each an event body with its ``job_id``) in order; one result per event: ``{"job_id",
    "state"}`` when it was accepted, ``{"job_id", "status", "detail"[, "field"]}`` when it was refused (the
    status and detail the single-event endpoint answers)."""
    results: list[dict] = []
    ended = False
    for event in events:
        job_id = event["job_id"]
        try:
            if event["type"] == "checkpoint":  # (scheduler/services/checkpoints.py)
                job, recorded = node_job_checkpoint(node=node, job_id=job_id, event=event)
                results.append({"job_id": job_id, "state": job.state, "recorded": recorded})
                continue
            job = node_job_event(node=node, job_id=job_id, event=event, wake=False)
        except NodeProtocolError as exc:
            results.append({"job_id": job_id, "status": exc.status, "detail": str(exc),
                            **({"field": exc.field} if exc.field else {})})
            continue
        ended = ended or event["type"] != "started"
        results.append({"job_id": job_id, "state": job.state})
    if ended:
        wake_cycle()  # once: each event committed on its own, so at once unless a caller holds a transaction
    return results
