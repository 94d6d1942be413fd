"""A node's job events applied together (``POST /api/v1/node/events/``, and the single event's endpoint as a
batch of one): one transaction, the batch's job rows locked in one query, its writes set-based.

Each event is judged as if it came alone, in the order sent (``node_jobs._judged``: who may report about which
attempt), against what the rows hold once the events before it are applied, and answered exactly as the single
event's endpoint answers it (docs/node-protocol.md). What makes that safe without a savepoint per event:

- The judging comes first and writes nothing: a refused event (an older attempt, another node's job) raises
  before anything of it is written, so it rolls back nothing of the others and holds up none of them.
- The rows are locked (``FOR NO KEY UPDATE``, in id order, as the cycle and a heartbeat lock the jobs they
  change, so none of them deadlocks with a batch), so what the lock read says of a job stays true but for the
  batch's own writes, which are applied to the objects read as they are decided.
- Starts and ends are buffered and written together: the starts in one ``UPDATE`` and one ``INSERT`` of their
  transitions, the ends' allocations closed in one ``UPDATE`` and their jobs' GPU time in another; each end
  then settles by the lifecycle's rules (``node_jobs._settle``: retries, preemption, restarts...), whose moves
  are written together (``_Moves``: one UPDATE per distinct move, one INSERT of their records), and the ended
  jobs are read again in one query. The buffer is written first whenever an event needs the rows as
  they are: a checkpoint (its rule reads the row), or any event about a job whose end is buffered (the job
  settled, perhaps as a new attempt).
- An error of the database (not a refusal) rolls the whole batch back: nothing is half-written, and the node,
  which got no answer, sends the batch again; applying it again is harmless (a repeated event about the
  current attempt is answered with the job's state and changes nothing).

The cycle is woken once for a batch in which an attempt ended, and the nodes of gangs asked to stop (a member
ended here) are told once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime

from django.db import connection, transaction
from django.db.models import Q

from scheduler.models import Allocation, Job, JobTransition, Node
from scheduler.models.jobs import JobState
from scheduler.services.checkpoints import node_job_checkpoint
from scheduler.services.common import transition_fields
from scheduler.services.jobs import wake_cycle
from scheduler.services.node_jobs import (
    _attempt_ended_here,
    _end_fields,
    _gpu_seconds,
    _judged,
    _not_current,
    _start_fields,
    _unknown,
)
from scheduler.services.nodes import NodeProtocolError
from scheduler.signals import jobs_transitioned
from scheduler.wake import holders_notify

STARTABLE = (JobState.ADMITTED, JobState.STARTING)


@dataclass
class _End:
    index: int  # the event's place in the batch: its answer is the job's state once settled
    job: Job
    event: dict
    closed: list[Allocation]
    elsewhere: bool


@dataclass
class EventBatch:
    """The batch's locked jobs (``jobs``, by id; after the batch, as each ended), their allocations that matter
    here (this node's, and any still open), the answers (``results``: a dict, or the NodeProtocolError of a
    refused event) and what is buffered."""

    node: Node
    jobs: dict[int, Job]
    allocations: dict[int, list[Allocation]]
    now: datetime | None
    results: list[dict | NodeProtocolError | None] = field(default_factory=list)
    starts: list[tuple[Job, str, dict]] = field(default_factory=list)  # (job, the state it started from, event)
    ends: dict[int, _End] = field(default_factory=dict)  # by job id: one at most (another event flushes it)
    ended: bool = False  # an attempt ended: the cycle is to be woken
    gangs_stopping: list[int] = field(default_factory=list)  # their other members' nodes are to be told

    @classmethod
    def locked(cls, node: Node, job_ids: set[int]) -> EventBatch:
        """Lock the jobs of ``job_ids`` that have an allocation on ``node`` (the others are unknown to it), in
        id order, with the database's clock (the time of every event of the batch); read their allocations."""
        jobs = list(Job.objects.raw(_LOCK_SQL, [sorted(job_ids), node.pk]))
        allocations: dict[int, list[Allocation]] = {job.pk: [] for job in jobs}
        if jobs:
            for alloc in Allocation.objects.filter(Q(node=node) | Q(ended_at__isnull=True),
                                                   job_id__in=list(allocations)):
                allocations[alloc.job_id].append(alloc)
        return cls(node=node, jobs={job.pk: job for job in jobs}, allocations=allocations,
                   now=max((job.clock for job in jobs), default=None))  # once every row was locked

    def apply(self, event: dict) -> None:
        """Judge ``event`` and apply it (or buffer its writes); its answer goes to ``results`` in its place."""
        self.results.append(None)
        try:
            self.results[-1] = self._apply(len(self.results) - 1, event)
        except NodeProtocolError as exc:
            self.results[-1] = exc

    def _apply(self, index: int, event: dict) -> dict | None:
        job_id, attempt = event["job_id"], event["attempt"]
        if event["type"] == "checkpoint" or job_id in self.ends:
            self.flush()
        job = self.jobs.get(job_id)
        if job is None:
            raise _unknown(job_id)
        if event["type"] == "checkpoint":  # its own rules (scheduler/services/checkpoints.py), the row as it is now
            job, recorded = node_job_checkpoint(node=self.node, job_id=job_id, event=event)
            self.jobs[job_id].last_checkpoint_at = job.last_checkpoint_at
            return checkpoint_answer(job, recorded)
        here = [a for a in self.allocations[job_id] if a.node_id == self.node.pk]
        if not _judged(job, attempt, [(a.attempt, a.ended_at) for a in here], self.now):
            if attempt != job.attempt:
                raise _not_current(job, attempt)
            return {"job_id": job.pk, "state": job.state}  # a repeat whose answer was lost: nothing changes
        if event["type"] == "started":
            if job.state in STARTABLE:
                self.starts.append((job, job.state, event))
                for name, value in {**_start_fields(event, self.now), "state": JobState.RUNNING}.items():
                    setattr(job, name, value)
            return {"job_id": job.pk, "state": job.state}
        held = [a for a in self.allocations[job_id] if a.attempt == job.attempt and a.ended_at is None]
        closed = [a for a in held if a.node_id == self.node.pk]
        if not closed:
            return {"job_id": job.pk, "state": job.state}
        self.ends[job_id] = _End(index, job, event, closed, elsewhere=len(closed) < len(held))
        return None  # answered once it settled (``flush``)

    def flush(self) -> None:
        """Write what is buffered: the starts, then the ends (closed together, then each settled)."""
        if self.starts:
            _starts_write(self.node, self.starts, self.now)
            self.starts = []
        if not self.ends:
            return
        ends, self.ends = list(self.ends.values()), {}
        _closes_write(ends, self.now)
        moves = _Moves()
        for end in ends:
            if _attempt_ended_here(end.job, end.event, self.now, elsewhere=end.elsewhere, transition=moves.add):
                self.gangs_stopping.append(end.job.pk)
        moves.write({end.job.pk: end.job.state for end in ends})
        self.ended = True
        for job in Job.objects.filter(pk__in={end.job.pk for end in ends}):  # settled by the lifecycle's rules
            self.jobs[job.pk] = job
        for end in ends:
            self.results[end.index] = {"job_id": end.job.pk, "state": self.jobs[end.job.pk].state}


def checkpoint_answer(job: Job, recorded: bool) -> dict:
    """The answer to a ``checkpoint`` event (``node_job_checkpoint``'s job and whether it recorded one)."""
    return {"job_id": job.pk, "state": job.state, "recorded": recorded, "last_checkpoint_at": job.last_checkpoint_at}


# ``locked``'s read as one fixed statement (its clock is ``db_clock``'s): the ORM built the same query (the EXISTS,
# the lock, the clock) at every batch for ~0.9 ms of CPU, about a tenth of a batch of five events' CPU
# (bench/README.md, "A node's batch of events, cheaper").
_JOBS, _ALLOCATIONS = Job._meta.db_table, Allocation._meta.db_table
_LOCK_SQL = (
    f'SELECT "{_JOBS}".*, clock_timestamp() AS "clock" FROM "{_JOBS}" WHERE "{_JOBS}"."id" = ANY(%s::bigint[]) '
    f'AND EXISTS (SELECT 1 FROM "{_ALLOCATIONS}" alloc WHERE alloc."job_id" = "{_JOBS}"."id" AND alloc."node_id" = %s) '
    f'ORDER BY "{_JOBS}"."id" ASC FOR NO KEY UPDATE')


class _Moves:
    """The ends' settling moves (``job_transition``'s arguments, as ``node_jobs._settle`` decides them), written
    together: one guarded UPDATE per distinct move (every job that exited 0 moves alike) and one INSERT of
    their records. Each move is certain: the rows are locked, in the holding states the moves start from."""

    def __init__(self) -> None:
        self.moves: dict[str, list] = {}

    def add(self, job_id: int, *, from_states: tuple[str, ...], to_state: str, cause: str, at: datetime,
            details: dict | None = None, extra: dict | None = None) -> bool:
        fields = transition_fields(to_state, extra)
        key = json.dumps([from_states, to_state, at, fields], sort_keys=True, default=str)
        self.moves.setdefault(key, [from_states, to_state, at, fields, []])[4].append((job_id, cause, details))
        return True

    def write(self, states: dict[int, str]) -> None:
        """Write the moves of jobs in ``states`` (each job's state before its move)."""
        records = []
        for from_states, to_state, at, fields, jobs in self.moves.values():
            ids = [job_id for job_id, _cause, _details in jobs]
            moved = Job.objects.filter(pk__in=ids, state__in=from_states).update(state=to_state, **fields)
            if moved != len(ids):  # cannot happen under the lock; if it did, nothing of the batch is kept
                raise RuntimeError(f"jobs {ids}: {moved} of them moved to {to_state}")
            records += [JobTransition(job_id=job_id, from_state=states[job_id], to_state=to_state, at=at,
                                      cause=cause[:300], details=details or {}) for job_id, cause, details in jobs]
        jobs_transitioned.send(sender=JobTransition, transitions=JobTransition.objects.bulk_create(records))


def node_events_apply(*, node: Node, events: list[dict], wake: bool = True) -> EventBatch:
    """Apply ``events`` of ``node`` (each an event body with its ``job_id``) in order, in one transaction;
    the batch holds one answer per event. An attempt's end wakes the cycle once, unless ``wake`` is false."""
    with transaction.atomic():
        batch = EventBatch.locked(node, {event["job_id"] for event in events})
        for event in events:
            batch.apply(event)
        batch.flush()
        if batch.gangs_stopping:  # their other members' nodes stop them now, not at their next heartbeat
            holders_notify(batch.gangs_stopping)
        if batch.ended and wake:
            wake_cycle()  # on commit
    return batch


def _starts_write(node: Node, starts: list[tuple[Job, str, dict]], now: datetime) -> None:
    """Move the started jobs to ``running`` with what each event set (``_start_fields``) in one statement,
    guarded by their state, and record each move (one INSERT)."""
    rows = [(job.pk, job.service_address, job.service_health) for job, _state, _event in starts]
    table = Job._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f'UPDATE "{table}" SET "state" = %s, "started_at" = %s, "service_address" = v.address, '
            f'"service_health" = v.health, "service_health_message" = \'\' '
            f'FROM (VALUES {", ".join(["(%s::bigint, %s, %s)"] * len(rows))}) AS v(id, address, health) '
            f'WHERE "{table}"."id" = v.id AND "{table}"."state" IN (%s, %s) RETURNING "{table}"."id"',
            [JobState.RUNNING, now, *(value for row in rows for value in row), *STARTABLE])
        moved = {row[0] for row in cursor.fetchall()}
    transitions = JobTransition.objects.bulk_create(
        JobTransition(job_id=job.pk, from_state=state, to_state=JobState.RUNNING, at=now,
                      cause=f"processes started on {node.name}"[:300], details={"pid": event.get("pid")})
        for job, state, event in starts if job.pk in moved)
    jobs_transitioned.send(sender=JobTransition, transitions=transitions)


def _closes_write(ends: list[_End], now: datetime) -> None:
    """Close the ending attempts' allocations on this node in one statement, and add their GPU time to their
    jobs (with the exit code and cause the node named, ``_end_fields``) in another; the job objects follow."""
    Allocation.objects.filter(pk__in=[a.pk for end in ends for a in end.closed]).update(ended_at=now)
    rows = []
    for end in ends:
        for alloc in end.closed:
            alloc.ended_at = now
        job = end.job
        for name, value in _end_fields(job, end.event).items():
            setattr(job, name, value)
        job.attained_gpu_seconds += _gpu_seconds(end.closed, now)
        rows.append((job.pk, job.attained_gpu_seconds, job.exit_code, job.failure_reason, job.failure_message))
    table = Job._meta.db_table
    with connection.cursor() as cursor:  # the rows are locked: the values read with the lock, plus this batch's
        cursor.execute(
            f'UPDATE "{table}" SET "attained_gpu_seconds" = v.attained, "exit_code" = v.exit_code, '
            f'"failure_reason" = v.reason, "failure_message" = v.message '
            f'FROM (VALUES {", ".join(["(%s::bigint, %s::double precision, %s::integer, %s, %s)"] * len(rows))}) '
            f'AS v(id, attained, exit_code, reason, message) WHERE "{table}"."id" = v.id',
            [value for row in rows for value in row])
