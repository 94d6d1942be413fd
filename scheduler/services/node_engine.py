"""A node whose work an existing engine launches (Slurm, through the Slurm bridge) has two places where an
operator may take it out of service: the engine and Rota. Each side's drain is mirrored to the other, and
who set it is told by its reason:

- the engine's own drain, down or resume reaches Rota in the node's reports (``engine`` in register and
  heartbeat) and is recorded with the reason ``"<engine>: <its reason>"`` and no user: it is the engine's;
- a Rota drain (an admin's, or a GPU fault's) goes back to the bridge in every answer (``node_state``),
  which drains the node in the engine with the reason ``"rota: <reason>"``; when the engine reports that
  drain back it changes nothing here, and a Rota resume lifts it there.

A drain made in the engine is lifted in the engine: Rota does not resume over it (the next report would
drain the node again). This module is the one place these rules live.
"""

from scheduler.models import Job, Node
from scheduler.models.jobs import HOLDING_STATES

MIRRORED_PREFIX = "rota: "  # the reason the bridge gives a Rota drain in the engine


def engine_reason_prefix(engine: dict) -> str:
    return f"{engine['name']}: "


def engine_owns(node: Node, engine_name: str) -> bool:
    """Whether the node's current state was set by its engine (not by a person or a Rota health check)."""
    return node.state_changed_by_id is None and node.state_reason.startswith(f"{engine_name}: ")


def engine_state_apply(*, node: Node, engine: dict, now) -> None:
    """Apply what the engine says of ``node`` (a row locked by the caller, its fields current). ``engine`` is
    ``{"name", "state": ready|draining|drained|down, "reason"}``. A down node's held jobs are settled as when
    a node goes silent: the engine has lost them."""
    from scheduler.services.node_jobs import _lose_node

    state, reason = engine["state"], (engine.get("reason") or "").strip()
    prefix = engine_reason_prefix(engine)
    owned = engine_owns(node, engine["name"])
    if state in (Node.DRAINING, Node.DRAINED) and reason.startswith(MIRRORED_PREFIX):
        return  # Rota's own drain, reported back by the engine: Rota already knows (or has resumed it)
    if state == Node.DOWN:
        if node.state != Node.DOWN:
            _set(node, Node.DOWN, prefix + (reason or "down"), now)
            held = Job.objects.filter(allocations__node=node, allocations__ended_at__isnull=True,
                                      state__in=HOLDING_STATES).distinct().order_by("pk")
            for job in held:
                _lose_node(job, node, now)
        return
    if state in (Node.DRAINING, Node.DRAINED):
        wanted = prefix + (reason or state)
        if (node.state == Node.READY or owned) and (node.state, node.state_reason) != (state, wanted[:300]):
            _set(node, state, wanted, now)
        return
    if owned and node.state != Node.READY:  # the engine resumed (or brought back) a node it had taken out
        _set(node, Node.READY, prefix + "in service", now)


def node_state_view(node: Node, engine: dict | None) -> dict:
    """The node's state as the node API answers it, for an engine bridge to mirror: ``set_by_engine`` says
    the state came from the reporting engine itself (nothing to mirror back)."""
    node.refresh_from_db(fields=["state", "state_reason", "state_changed_by"])
    return {"state": node.state, "reason": node.state_reason,
            "set_by_engine": bool(engine) and engine_owns(node, engine["name"])}


def _set(node: Node, state: str, reason: str, now) -> None:
    Node.objects.filter(pk=node.pk).update(state=state, state_reason=reason[:300], state_changed_by=None,
                                              state_changed_at=now)
    node.state, node.state_reason, node.state_changed_by_id = state, reason[:300], None
