"""core -> ORM: persist one cycle's decisions with guarded updates, inside the cycle's transaction."""

import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import psycopg
from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Max, Min

from scheduler import notebooks
from scheduler.core.types import Decisions, PendingInfo, Reason, Start
from scheduler.core.types import Preemption as PreemptionDecision
from scheduler.metrics_kueue import admissions_tally
from scheduler.models import Allocation, Job, JobTransition, Preemption
from scheduler.models.jobs import HOLDING_STATES, WAITING_STATES, JobState, StopReason

log = logging.getLogger(__name__)


@dataclass
class DispatchResult:
    """What a cycle actually changed (a start can be refused by a guard if the world moved on)."""

    started: int = 0
    refused: int = 0
    preempted: int = 0
    pending_updated: int = 0


def _from_ts(value: float | None) -> datetime | None:
    if value is None:
        return None
    return datetime.fromtimestamp(value, tz=UTC)


def persist_decisions(decisions: Decisions, gpu_nodes: dict[int, int], now: datetime) -> DispatchResult:
    """Apply starts (pending -> admitted + allocations), preemptions (ask the victim to stop, record who
    preempted whom) and pending reasons/positions/estimates (``gpu_nodes``: each GPU's node id, from
    ``build_snapshot``). Each start is all-or-nothing in a savepoint: a start whose job is no longer pending,
    or whose GPUs the database refuses, changes nothing."""
    result = DispatchResult()
    if decisions.starts:
        result.started, result.refused = _start_jobs(decisions.starts, gpu_nodes, now)
    if decisions.preemptions:
        result.preempted = _ask_victims_to_stop(decisions.preemptions, now)

    if decisions.pending:
        result.pending_updated = _store_pending(decisions.pending, now)
    return result


def _start_jobs(starts: tuple[Start, ...], gpu_nodes: dict[int, int], now: datetime) -> tuple[int, int]:
    """Start the jobs of ``starts`` that are still pending; return (started, refused).

    All together first, in one savepoint: a few statements for any number of starts. If the database refuses
    a GPU (held by something this cycle did not see), that savepoint is rolled back and the starts are made
    one by one, each in its own savepoint, so only the refused ones are left out."""
    try:
        with transaction.atomic():
            return _start_together(starts, gpu_nodes, now)
    except IntegrityError:
        log.info("a start of this cycle was refused by the database; starting its %d jobs one by one", len(starts))
    started = refused = 0
    for start in starts:
        try:
            with transaction.atomic():
                if _start_together((start,), gpu_nodes, now)[0]:
                    started += 1
                    continue
        except IntegrityError:
            log.warning("start of job %s refused by the database (GPU already held)", start.job_id)
        refused += 1
    return started, refused


def _start_together(starts: tuple[Start, ...], gpu_nodes: dict[int, int], now: datetime) -> tuple[int, int]:
    """Admit the jobs of ``starts`` still pending (their rows locked in id order first), record their
    transitions and allocations, and give services a port; return (started, refused)."""
    by_job = {s.job_id: s for s in starts}
    jobs = list(Job.objects.select_for_update().filter(pk__in=by_job, state=JobState.PENDING).order_by("pk")
                .values_list("pk", "attempt", "kind"))
    if jobs:
        Job.objects.filter(pk__in=[pk for pk, _attempt, _kind in jobs]).update(
            state=JobState.ADMITTED, admitted_at=now, pending_reason_code="", pending_reason_message="",
            pending_reason_details={}, queue_position=None, estimated_start=None, stop_reason=StopReason.NONE)
        JobTransition.objects.bulk_create(
            JobTransition(job_id=pk, from_state=JobState.PENDING, to_state=JobState.ADMITTED, at=now,
                          cause="admitted by the scheduler",
                          details={"gpus": [p.gpu_id for p in by_job[pk].placements], "borrowed": by_job[pk].borrowed})
            for pk, _attempt, _kind in jobs
        )
        admissions_tally([pk for pk, _attempt, _kind in jobs], now)
        Allocation.objects.bulk_create(
            Allocation(job_id=pk, attempt=attempt, gpu_id=p.gpu_id, node_id=gpu_nodes[p.gpu_id],
                       share_milli=max(1, round(p.share * 1000)), started_at=now)
            for pk, attempt, _kind in jobs for p in by_job[pk].placements
        )
        services = {pk for pk, _attempt, kind in jobs if kind in SERVICE_KINDS}
        for start in starts:  # in the engine's order, as one by one would
            if start.job_id in services:
                _assign_port(start.job_id, gpu_nodes[start.placements[0].gpu_id])
        for pk, attempt, kind in jobs:
            if kind == notebooks.KIND:  # each attempt's server gets a token of its own
                notebooks.server_prepare(pk, attempt)
    return len(jobs), len(starts) - len(jobs)


def _ask_victims_to_stop(preemptions: tuple[PreemptionDecision, ...], now: datetime) -> int:
    """Mark each victim that still holds its GPUs and is not already stopping as preempted, and record who
    preempted it; return how many. Three statements for any number of victims: the victims' rows are
    locked first, in id order (no deadlock with another writer), so none moves on in between. The lock
    is a no-key one (only ``stop_reason`` changes): a heartbeat's samples that reference a victim (key
    share) do not wait on it."""
    by_victim = {p.job_id: p for p in preemptions}
    with transaction.atomic():
        victims = list(Job.objects.select_for_update(no_key=True).filter(
            pk__in=by_victim, state__in=HOLDING_STATES, stop_reason=StopReason.NONE).order_by("pk")
            .values_list("pk", "attempt"))
        if not victims:
            return 0
        Job.objects.filter(pk__in=[pk for pk, _attempt in victims]).update(stop_reason=StopReason.PREEMPT)
        Preemption.objects.bulk_create(
            Preemption(job_id=pk, attempt=attempt, by_job_id=by_victim[pk].by_job_id, reason=by_victim[pk].reason,
                       message=by_victim[pk].message[:500], gpu_seconds_lost=by_victim[pk].gpu_seconds_lost, at=now)
            for pk, attempt in victims
        )
    return len(victims)


# A stored queue position or estimated start is close enough, and left alone, while it is off by at most a tenth
# (of the position; of the wait the estimate announces, and at least ESTIMATE_SLACK_S): a draining queue moves
# every position and many estimates a little each cycle, and rewriting ~10,000 rows for that was most of a
# cycle's writing. Positions under 10 are exact; a reason, message or details that changed is always written.
SLACK = 0.1
ESTIMATE_SLACK_S = 10.0


def _store_pending(infos: tuple[PendingInfo, ...], now: datetime) -> int:
    """Write the pending reasons, positions and estimates of the jobs of ``infos`` that still wait; return
    how many still wait. A held job keeps its message while it stays held: it names who held it, and why.

    On PostgreSQL this is one statement with the values as arrays, sent in binary (Django's bulk_update
    builds a CASE WHEN per row, and client-side parameter quoting cost ~50 us per array element). Rows
    already holding those values (positions and estimates within their slack, above) are left alone: in a
    queue most are, and each rewritten row is a new row version for PostgreSQL to write and vacuum. Details
    compare as jsonb text, so 4 and 4.0 differ."""
    columns = (
        [i.job_id for i in infos], [i.reason.code for i in infos], [i.reason.message[:500] for i in infos],
        [json.dumps(dict(i.reason.details)) for i in infos], [i.queue_position for i in infos],
        [_from_ts(i.estimated_start) for i in infos],
    )
    if connection.vendor != "postgresql":
        waiting = set(Job.objects.filter(pk__in=columns[0], state__in=WAITING_STATES)
                      .values_list("pk", flat=True))
        for pk, code, message, details, position, estimate in zip(*columns, strict=True):
            if pk in waiting:
                keep = code == "Held" and Job.objects.filter(pk=pk, pending_reason_code="Held").exists()
                Job.objects.filter(pk=pk).update(
                    pending_reason_code=code, pending_reason_details=json.loads(details), queue_position=position,
                    estimated_start=estimate, **({} if keep else {"pending_reason_message": message}))
        return len(waiting)
    connection.ensure_connection()
    # A plain psycopg cursor on Django's connection (same transaction), its errors turned into Django's, so that
    # the statement is never prepared: one plan for arrays of any length would be a guess.
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(
            """
            WITH v AS (
                SELECT * FROM unnest(%(ids)b::bigint[], %(codes)b::text[], %(messages)b::text[], %(details)b::text[],
                                     %(positions)b::integer[], %(estimates)b::timestamptz[])
                              AS v(id, code, message, details, position, estimate)
            ), waiting AS (
                SELECT v.* FROM v JOIN scheduler_job j ON j.id = v.id WHERE j.state IN ('pending', 'held')
            ), changed AS (  -- runs whether or not the query below reads it
                UPDATE scheduler_job j SET pending_reason_code = w.code, pending_reason_details = w.details::jsonb,
                       queue_position = w.position, estimated_start = w.estimate,
                       -- a held job keeps the message of whoever held it (who, and why)
                       pending_reason_message = CASE WHEN j.pending_reason_code = 'Held' AND w.code = 'Held'
                                                     THEN j.pending_reason_message ELSE w.message END
                  FROM waiting w
                 WHERE j.id = w.id
                   AND (j.pending_reason_code, j.pending_reason_details::text,
                        j.pending_reason_code = 'Held' AND w.code = 'Held' OR j.pending_reason_message = w.message,
                        -- close enough (or both null): see SLACK and ESTIMATE_SLACK_S
                        COALESCE(abs(j.queue_position - w.position) <= w.position * %(slack)s,
                                 j.queue_position IS NULL AND w.position IS NULL),
                        COALESCE(abs(EXTRACT(EPOCH FROM j.estimated_start - w.estimate))
                                     <= GREATEST(%(estimate_slack)s, EXTRACT(EPOCH FROM w.estimate - %(now)s)
                                                                     * %(slack)s),
                                 j.estimated_start IS NULL AND w.estimate IS NULL))
                       IS DISTINCT FROM (w.code, w.details::jsonb::text, true, true, true)
            )
            SELECT count(*) FROM waiting
            """,
            {"ids": columns[0], "codes": columns[1], "messages": columns[2], "details": columns[3],
             "positions": columns[4], "estimates": columns[5], "now": now, "slack": SLACK,
             "estimate_slack": ESTIMATE_SLACK_S}, prepare=False,
        )
        return cursor.fetchone()[0]


SERVICE_KINDS = ("notebook", "inference")


def _assign_port(job_id: int, node_id: int) -> None:
    """Give a notebook or inference job a port on its (first) node that no other holding job there uses."""
    used = set(
        Job.objects.filter(state__in=HOLDING_STATES, allocations__node_id=node_id, allocations__ended_at__isnull=True,
                           service_port__isnull=False).exclude(pk=job_id).values_list("service_port", flat=True)
    )
    low, high = settings.ROTA_SERVICE_PORTS
    port = next(p for p in range(low, high + 1) if p not in used)
    Job.objects.filter(pk=job_id).update(service_port=port)


def expire_time_limits(now: datetime) -> list[int]:
    """Ask running jobs past their time limit to stop (the agent enforces it too; this is the backstop);
    return their ids."""
    asked = []
    for job in Job.objects.filter(
        state=JobState.RUNNING, stop_reason=StopReason.NONE, time_limit_minutes__isnull=False,
        started_at__isnull=False,
    ).only("pk", "started_at", "time_limit_minutes"):
        if job.started_at + timedelta(minutes=job.time_limit_minutes) <= now:
            if Job.objects.filter(pk=job.pk, stop_reason=StopReason.NONE).update(stop_reason=StopReason.TIMEOUT):
                asked.append(job.pk)
    return asked


IDLE_UTIL_PCT = 5.0


def reclaim_idle(now: datetime) -> list[int]:
    """Ask running jobs with an idle timeout (notebooks) to stop when every sample of their GPUs over the
    whole timeout window stayed under IDLE_UTIL_PCT and their notebook server (when it reports, see
    ``scheduler.notebooks``) saw no activity in that window either; return their ids. A window without
    samples from its start is not judged (no telemetry is not idleness)."""
    asked = []
    for job in Job.objects.filter(
        state=JobState.RUNNING, stop_reason=StopReason.NONE, idle_timeout_minutes__isnull=False,
        started_at__isnull=False,
    ).only("pk", "attempt", "started_at", "idle_timeout_minutes"):
        window = timedelta(minutes=job.idle_timeout_minutes)
        if job.started_at + window > now:
            continue
        stats = job.gpu_samples.filter(at__gte=now - window).aggregate(first=Min("at"), busiest=Max("util_pct"))
        if stats["first"] is None or stats["first"] > now - window + timedelta(minutes=2):
            continue
        if notebooks.active_since(job.pk, job.attempt, now - window, now):
            continue  # someone works in the notebook (editing, running cells on the CPU)
        if stats["busiest"] is not None and stats["busiest"] < IDLE_UTIL_PCT:
            if Job.objects.filter(pk=job.pk, stop_reason=StopReason.NONE).update(stop_reason=StopReason.IDLE):
                asked.append(job.pk)
    return asked


def mark_held(held: dict, now: datetime) -> int:
    """Give the jobs the cycle held back itself (``scheduler.holds``, not the engine) their reason; they
    have no queue position and no estimated start. Written as the engine's reasons are (``_store_pending``:
    one statement, rows already showing it left alone); returns how many still wait."""
    return _store_pending(tuple(PendingInfo(job_id, Reason(hold.code, hold.message, hold.details), None, None)
                                for job_id, hold in held.items()), now)


def end_never_satisfied(held: dict, now: datetime) -> int:
    """End the pending jobs held with ``DependencyNeverSatisfied`` (``scheduler.dependencies``): they are
    cancelled, keeping that reason so the team reads why; returns how many. Their own dependents are judged
    by the next cycle."""
    from scheduler.dependencies import NEVER_CODE
    from scheduler.services.common import job_transition

    ended = 0
    for job_id, hold in sorted(held.items()):
        if hold.code != NEVER_CODE:
            continue
        ended += job_transition(
            job_id, from_states=(JobState.PENDING,), to_state=JobState.CANCELLED,
            cause=f"dependency never satisfied: {hold.message}", at=now, details=dict(hold.details),
            extra={"finished_at": now, "pending_reason_code": hold.code, "pending_reason_message": hold.message[:500],
                   "pending_reason_details": dict(hold.details)})
    return ended
