"""How often each node heartbeats, and how long the portal waits before it calls a silent node down.

The heartbeat is the level-triggered safety net (DESIGN.md, principle 3); decisions reach nodes at once through
the long-poll (``POST /api/v1/node/wait/``). So the heartbeat's cadence grows with the fleet instead of the
portal's load: the portal budgets ``ROTA_NODE_HEARTBEATS_PER_S`` heartbeats a second, and a fleet larger than
that many per ``ROTA_NODE_HEARTBEAT_INTERVAL_S`` is told to heartbeat every ``nodes / ROTA_NODE_HEARTBEATS_PER_S``
seconds, up to ``ROTA_NODE_HEARTBEAT_INTERVAL_MAX_S`` (as Kubernetes' kubelets report every 10 s and Slurm's
slurmctld pings every SlurmdTimeout/3, whatever the size).

Each node is told its interval and its timeout in every register and heartbeat answer, and the portal stores
the timeout it told the node beside ``last_heartbeat_at`` (one UPDATE): the node is down once it has been
silent for longer than that, its own deadline. So a node whose fleet shrank meanwhile (a shorter interval for
the others) is not marked down before the deadline it was given, and its agent, which stops its jobs after
the same timeout without an answer, agrees with the portal on when that is.
"""

from __future__ import annotations

import math
import threading
import time

from django.conf import settings

from scheduler.models import Node

MISSED_BEATS = 3  # a node is down once it missed this many heartbeats (and never before the timeout setting)
COUNT_TTL_S = 10.0  # each web process counts the nodes in service at most this often

_lock = threading.Lock()
_counted: tuple[float, int] | None = None  # (time.monotonic() of the count, nodes in service)


def nodes_in_service() -> int:
    """The nodes that heartbeat (every state but ``down``), counted at most once every ``COUNT_TTL_S`` per
    process: a heartbeat does not pay a query for it."""
    global _counted
    now = time.monotonic()
    counted = _counted
    if counted is not None and now - counted[0] < COUNT_TTL_S:
        return counted[1]
    with _lock:
        if _counted is not None and now - _counted[0] < COUNT_TTL_S:  # another thread counted meanwhile
            return _counted[1]
        count = Node.objects.exclude(state=Node.DOWN).count()
        _counted = (time.monotonic(), count)
        return count


def forget_count() -> None:
    """Count again at the next call (tests, after they change the fleet)."""
    global _counted
    _counted = None


def heartbeat_interval_s(nodes: int | None = None) -> int:
    """Seconds between a node's heartbeats: ``ROTA_NODE_HEARTBEAT_INTERVAL_S``, longer for a fleet above the
    portal's heartbeat budget, at most ``ROTA_NODE_HEARTBEAT_INTERVAL_MAX_S`` (or the first, if that is longer)."""
    nodes = nodes_in_service() if nodes is None else nodes
    spread = min(math.ceil(nodes / settings.ROTA_NODE_HEARTBEATS_PER_S), settings.ROTA_NODE_HEARTBEAT_INTERVAL_MAX_S)
    return max(settings.ROTA_NODE_HEARTBEAT_INTERVAL_S, spread)


def heartbeat_timeout_s(interval_s: int) -> int:
    """How long a node heartbeating every ``interval_s`` may be silent before it is down (and before its agent
    stops its jobs): ``ROTA_NODE_HEARTBEAT_TIMEOUT_S``, or ``MISSED_BEATS`` intervals when that is longer."""
    return max(settings.ROTA_NODE_HEARTBEAT_TIMEOUT_S, MISSED_BEATS * interval_s)


def cadence() -> dict[str, int]:
    """What a register or heartbeat answer tells the node, and what the portal stores for its deadline."""
    interval = heartbeat_interval_s()
    return {"heartbeat_interval_s": interval, "heartbeat_timeout_s": heartbeat_timeout_s(interval)}


def heartbeat_address() -> dict[str, str]:
    """Where nodes send their heartbeats, in every register and heartbeat answer: ``heartbeat_url``, the
    node-control server's root (``ROTA_NODE_HEARTBEAT_URL``), where the site serves node control apart; nothing
    (the address the node registered at) otherwise. An agent follows the latest answer, so a site that moves or
    drops the server is followed at the next heartbeat."""
    url = settings.ROTA_NODE_HEARTBEAT_URL
    return {"heartbeat_url": url} if url else {}
