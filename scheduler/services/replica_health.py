"""The health of inference replicas (and other listening jobs) as their node's probe reports it.

The node agent probes a listening job's ``ROTA_HEALTH_PATH`` (``scheduler/agent/probes.py``): its ``started``
event says ``starting`` (an agent that does not probe says nothing: the replica is not probed, "") and each
heartbeat then reports, per running attempt, ``starting``, ``healthy`` or ``unhealthy``. The portal keeps
it on the job (``Job.service_health``); the gateway sends traffic only to replicas that are not probed ("")
or healthy. The agent itself restarts an attempt whose probe fails too often: it ends ``exited`` with reason
``Unhealthy`` and the job lifecycle starts it again (``scheduler.services.node_jobs``).
"""

from django.db import transaction
from django.db.models import Q

from scheduler.models import Allocation, Job, JobEvent
from scheduler.models.jobs import JobState
from scheduler.services.common import db_now

STARTING, HEALTHY, UNHEALTHY = "starting", "healthy", "unhealthy"
HEALTH_STATES = (STARTING, HEALTHY, UNHEALTHY)
STARTED_HEALTH = ("", STARTING)  # a started event's: probed from now on, or not probed
ROUTABLE = ("", HEALTHY)  # the health values the gateway forwards to


def restart_cause(failure: str, message: str, code: int | None, signal: int | None) -> str:
    """Why a service's attempt is restarted, for its transition: the node's reason (``Unhealthy`` with the
    probe's message) or how it exited."""
    if failure:
        return f"service {failure}: {message}"[:250] if message else f"service {failure}"
    how = f"killed by signal {signal}" if signal else (f"exit code {code}" if code is not None else "no exit code")
    return f"service failed ({how})"


def replica_health_record(*, node, running: list[dict]) -> int:
    """Keep what ``node`` reports of its running attempts' health; returns how many jobs changed. Only the
    current attempt of a job running with an open allocation on this node is updated; a change to
    ``unhealthy`` is also recorded as a job event (its page shows when and why)."""
    reports = {(e["job_id"], e["attempt"]): (e["health"], e.get("health_message", "")[:300])
               for e in running if e.get("health") in HEALTH_STATES}
    if not reports:
        return 0
    pairs = Q()
    for job_id, attempt in reports:
        pairs |= Q(pk=job_id, attempt=attempt)
    held = Allocation.objects.filter(node=node, ended_at__isnull=True).values("job_id")
    changed = 0
    with transaction.atomic():
        now = db_now()
        rows = (Job.objects.select_for_update(no_key=True).filter(pairs, pk__in=held, state=JobState.RUNNING)
                .order_by("pk").values_list("pk", "attempt", "service_health", "service_health_message"))
        for pk, attempt, health, message in rows:
            new_health, new_message = reports[(pk, attempt)]
            if (health, message) == (new_health, new_message):
                continue
            Job.objects.filter(pk=pk, attempt=attempt).update(service_health=new_health,
                                                               service_health_message=new_message)
            if new_health != health and new_health == UNHEALTHY:
                JobEvent.objects.create(job_id=pk, attempt=attempt, at=now, kind="unhealthy",
                                        message=new_message or "health probe failed")
            changed += 1
    return changed
