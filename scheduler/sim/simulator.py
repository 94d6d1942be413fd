"""The discrete-event simulator: replay a trace through ``scheduler.core.schedule``.

Events are arrivals, completions (including time-limit ends) and the end of a preempted job's grace
period. Scheduling cycles run on ticks ``k * cycle_interval_s``; a tick runs a cycle only when
something changed since the last one and a start is possible at all (some waiting job fits the free
GPUs, or the policy may preempt), or, while jobs wait, every ``heartbeat_s`` (fair-share usage decays
with time, so the same state can give new decisions). Each cycle builds a snapshot, calls the engine,
checks the engine's invariants, and applies the decisions in memory:

* a start binds the job to its devices; it ends after the restart cost it owes (0 on its first start)
  plus its remaining work, or at its time limit;
* a preemption marks the victim ``terminating``: its progress stops at once (it checkpoints on the
  stop signal, or rolls back to its last periodic checkpoint when ``checkpoint_interval_s`` is set),
  it keeps its devices for the grace period, then returns to the queue owing ``restart_cost_s``.

The simulator never decides anything itself: ``schedule_fn`` (default ``scheduler.core.schedule``) does.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from scheduler.core.plugins.priority import las_level
from scheduler.core.policies import DEFAULT_PRIORITY_CLASSES
from scheduler.core.types import (
    Decisions,
    Placement,
    Policy,
    PriorityClassInfo,
    Snapshot,
)
from scheduler.sim.cluster import Cluster
from scheduler.sim.holdings import Holdings
from scheduler.sim.jobstate import JobViews, SimJob
from scheduler.sim.ledger import TeamLedger
from scheduler.sim.quotas import TeamSetup
from scheduler.sim.results import JobRecord, SimResult
from scheduler.sim.trace import Trace, TraceJob

ScheduleFn = Callable[[Snapshot], Decisions]
CheckFn = Callable[[Snapshot, Decisions], list[str]]
ProgressFn = Callable[[float], None]

_EPS = 1e-9
_COMPLETE, _STOP = 0, 1
_MAX_EXAMPLES = 5


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Knobs of the simulated system (not of the policy). Times in seconds.

    exact_time_limits: give every job a time limit equal to its true run time (plus restart costs), an
      oracle for backfill; the trace's own limits are used otherwise.
    until: stop the replay at this time (jobs still running or waiting are reported as unfinished).
    skip_idle_cycles: with a preempting policy, skip cycles in which no preemption the core's contract
      allows could happen (see ``Simulator._may_start``); off: cycle whenever something changed.
    """

    cycle_interval_s: float = 60.0
    restart_cost_s: float = 60.0
    checkpoint_interval_s: float | None = None
    heartbeat_s: float = 600.0
    check_invariants: bool = True
    exact_time_limits: bool = False
    until: float | None = None
    skip_idle_cycles: bool = True


class Simulator:
    """One replay of ``trace`` on ``cluster`` under ``policy``. Call :meth:`run` once."""

    def __init__(
        self,
        trace: Trace,
        cluster: Cluster,
        setup: TeamSetup,
        policy: Policy,
        config: SimConfig = SimConfig(),
        *,
        schedule_fn: ScheduleFn | None = None,
        check_fn: CheckFn | None = None,
        priority_classes: tuple[PriorityClassInfo, ...] = DEFAULT_PRIORITY_CLASSES,
        progress: ProgressFn | None = None,
    ) -> None:
        if schedule_fn is None or (check_fn is None and config.check_invariants):
            from scheduler.core import check_invariants, schedule

            schedule_fn = schedule_fn or schedule
            check_fn = check_fn or check_invariants
        self.schedule_fn = schedule_fn
        self.check_fn = check_fn
        self.trace, self.cluster, self.setup, self.policy, self.config = trace, cluster, setup, policy, config
        self.levels = policy.las_thresholds_gpu_s if policy.ordering == "las" else ()
        self.priority_classes = priority_classes
        self.views = JobViews({c.name: c for c in priority_classes}, config.exact_time_limits)
        self.progress = progress
        self.model_of = {g.id: g.model for n in cluster.nodes for g in n.gpus}
        self.free_share = dict.fromkeys(self.model_of, 1.0)
        self.free_total = float(len(self.model_of))
        self.pending: dict[int, SimJob] = {}
        self.running: dict[int, SimJob] = {}
        self.jobs: dict[int, SimJob] = {}
        self.pending_requests: dict[float, int] = {}
        self.unseen: list[SimJob] = []
        # For skipping idle cycles: waiting requests per team, priorities of waiting jobs that may
        # preempt and of running jobs that may be preempted.
        self.team_requests: dict[str, dict[float, int]] = {}
        self.preemptors: dict[int, int] = {}
        self.victims: dict[int, int] = {}
        self.heap: list[tuple[float, int, int, int, int]] = []
        self.seq = 0
        teams = list(dict.fromkeys([t.name for t in setup.teams] + list(trace.teams)))
        self.ledger = TeamLedger(teams, setup.guaranteed_by_team(), policy.fair_share_half_life_s)
        self.holdings = Holdings(setup, teams)
        self.dirty = False
        self.span = trace.span_s
        self.result = SimResult(
            policy=policy.name, capacity=cluster.capacity, span_s=self.span, offered_gpu_s=trace.gpu_seconds
        )

    # -- the loop ------------------------------------------------------------------------------------

    def run(self) -> SimResult:
        """Replay the whole trace and return its result (jobs and counters; see ``metrics``)."""
        wall = time.perf_counter()
        arrivals = self.trace.jobs
        interval = self.config.cycle_interval_s
        until = self.config.until if self.config.until is not None else math.inf
        index = 0
        last_cycle = -math.inf
        now = _tick(arrivals[0].submit_time, interval) if arrivals else 0.0
        next_progress = 0.0
        while now <= until:
            index = self._process_until(now, arrivals, index)
            heartbeat = bool(self.pending) and now - last_cycle >= self.config.heartbeat_s - _EPS
            if self.dirty or heartbeat:
                if self._may_start():
                    self._cycle(now)
                    last_cycle = now
                elif self.pending:
                    self.result.skipped_cycles += 1
            self.dirty = False
            self._register_waiting(now)
            upcoming = min(
                arrivals[index].submit_time if index < len(arrivals) else math.inf,
                self.heap[0][0] if self.heap else math.inf,
            )
            if self.pending and self._may_start() and upcoming < math.inf:
                upcoming = min(upcoming, last_cycle + self.config.heartbeat_s)
            if upcoming == math.inf:
                break
            now = max(now + interval, _tick(upcoming, interval)) if interval > 0 else max(upcoming, now)
            if self.progress and now >= next_progress:
                self.progress(min(1.0, index / max(1, len(arrivals))))
                next_progress = now + self.span / 200 if self.span else math.inf
        end = min(until, now)
        self.ledger.advance_all(end if end < math.inf else 0.0)
        self._finish(end)
        self.result.wall_s = time.perf_counter() - wall
        return self.result

    def _process_until(self, now: float, arrivals: tuple[TraceJob, ...], index: int) -> int:
        """Apply arrivals and timed events up to ``now`` in time order; return the next arrival index."""
        heap = self.heap
        count = len(arrivals)
        while True:
            t_arrival = arrivals[index].submit_time if index < count else math.inf
            t_event = heap[0][0] if heap else math.inf
            if t_event <= t_arrival and t_event <= now:
                at, _seq, kind, job_id, attempt = heapq.heappop(heap)
                job = self.jobs[job_id]
                if attempt != job.attempt:
                    continue
                if kind == _COMPLETE:
                    self._complete(job, at)
                else:
                    self._stopped(job, at)
            elif t_arrival <= now:
                self._arrive(arrivals[index])
                index += 1
            else:
                return index

    def _register_waiting(self, now: float) -> None:
        """Jobs that a cycle (or a skipped one) left in the queue now count as waiting for the
        per-team figures (contention and starvation); a job merely between arrival and the next tick
        does not."""
        for job in self.unseen:
            if job.trace.id in self.pending and not job.waiting:
                job.waiting = True
                self.ledger.change_pending(job.trace.team, now, job.request, +1)
        self.unseen.clear()

    def _may_start(self) -> bool:
        """False when no cycle could start or preempt anything, so skipping it changes nothing.

        A waiting job can only start if it fits the free GPUs, or (when the policy preempts) by one of
        the two preemptions of the core's contract: ``Priority`` (a running preemptible job has a lower
        priority than a waiting job whose class may preempt) or ``Reclaim`` (the waiting job's team
        holds less than its guarantee of some model, by enough to take it with the free GPUs).
        With ``skip_idle_cycles`` off, or with a team tree (parents), a preempting policy always cycles.
        """
        if not self.pending:
            return False
        if min(self.pending_requests) <= self.free_total + _EPS:
            return True
        if not self.policy.preemption:
            return False
        if not self.config.skip_idle_cycles or self.holdings.has_parents or self.levels:
            return True  # (with LAS service levels, a fresh job outranks long-served ones of its class)
        if self.preemptors and self.victims and max(self.preemptors) > min(self.victims):
            return True
        if not (self.policy.reclaim and self.policy.borrowing):
            return False
        free = self.free_total
        return any(
            requests and self.holdings.may_reclaim(team, min(requests), free)
            for team, requests in self.team_requests.items()
        )

    # -- events --------------------------------------------------------------------------------------

    def _arrive(self, trace_job: TraceJob) -> None:
        """A trace job is submitted: it joins the queue."""
        job = SimJob(trace_job)
        self.jobs[trace_job.id] = job
        job.info = self.views.pending(job)
        self._enqueue(job, trace_job.submit_time)

    def _enqueue(self, job: SimJob, now: float) -> None:
        """Put ``job`` in the queue (on arrival or after a preemption) and mark the state changed."""
        self.pending[job.trace.id] = job
        _count(self.pending_requests, job.request, +1)
        _count(self.team_requests.setdefault(job.trace.team, {}), job.request, +1)
        if self.views.may_preempt(job):
            _count(self.preemptors, self.views.priority(job), +1)
        self.unseen.append(job)
        self.dirty = True

    def _dequeue(self, job: SimJob, now: float) -> None:
        """Take ``job`` out of the queue (it is starting)."""
        del self.pending[job.trace.id]
        _count(self.pending_requests, job.request, -1)
        _count(self.team_requests[job.trace.team], job.request, -1)
        if self.views.may_preempt(job):
            _count(self.preemptors, self.views.priority(job), -1)
        if job.waiting:
            job.waiting = False
            self.ledger.change_pending(job.trace.team, now, job.request, -1)

    def _release(self, job: SimJob, now: float) -> None:
        """Free the job's devices at ``now`` and account the attempt's GPU-seconds."""
        for p in job.placements:
            self.free_share[p.gpu_id] += p.share
        self.free_total += job.request
        self.holdings.change(job.trace.team, job.models, -1)
        self.ledger.change_held(job.trace.team, now, -job.request)
        del self.running[job.trace.id]
        if job.preempted_at is None and self.views.preemptible(job):
            _count(self.victims, self.views.priority(job), -1)
        held_s = now - job.started_at
        job.attained += held_s * job.request
        self.result.allocated_gpu_s += _clip(job.started_at, now, self.span) * job.request
        self.dirty = True

    def _complete(self, job: SimJob, now: float) -> None:
        """The job's attempt ends at ``now``: done, or stopped at its time limit."""
        work_from = job.started_at + job.overhead
        job.remaining = max(0.0, job.remaining - max(0.0, now - work_from))
        overhead_gpu_s = min(job.overhead, now - job.started_at) * job.request
        job.lost_gpu_s += overhead_gpu_s
        self.result.lost_gpu_s += overhead_gpu_s
        self.result.useful_gpu_s += _clip(min(work_from, now), now, self.span) * job.request
        job.overhead = 0.0
        self._release(job, now)
        job.end = now
        job.outcome = "completed" if job.remaining <= 1e-6 else "timed-out"
        job.info = None

    def _stopped(self, job: SimJob, now: float) -> None:
        """A preempted job's grace period is over: free its devices and requeue it."""
        stop = job.preempted_at if job.preempted_at is not None else now
        work_from = job.started_at + job.overhead
        saved_until = stop
        interval = self.config.checkpoint_interval_s
        if interval:
            saved_until = max(work_from, work_from + math.floor((stop - work_from) / interval) * interval)
        done = max(0.0, saved_until - work_from)
        job.remaining = max(_EPS, job.remaining - done)
        lost_s = (now - job.started_at) - done
        job.lost_gpu_s += lost_s * job.request
        self.result.lost_gpu_s += lost_s * job.request
        self.result.useful_gpu_s += _clip(min(work_from, saved_until), saved_until, self.span) * job.request
        self._release(job, now)
        job.overhead = self.config.restart_cost_s
        job.preempted_at = None
        job.info = self.views.pending(job)
        self._enqueue(job, now)

    # -- a cycle -------------------------------------------------------------------------------------

    def _cycle(self, now: float) -> bool:
        """Run one scheduling cycle at ``now``; return True when it started or preempted something."""
        result = self.result
        jobs = [job.info for job in self.pending.values()]
        if self.policy.ordering == "las":
            # With service levels the engine reads a running job's service only through its level.
            levels = self.levels
            for job in self.running.values():
                if not levels or las_level(job.attained_at(now), levels) != las_level(job.info.attained_gpu_s,
                                                                                      levels):
                    job.info = self.views.running(job, now)
        jobs.extend(job.info for job in self.running.values())
        snapshot = Snapshot(
            now=now,
            nodes=self.cluster.nodes,
            jobs=tuple(jobs),
            teams=self.setup.teams,
            quotas=self.setup.quotas,
            priority_classes=self.priority_classes,
            usage=self.ledger.usage_at(now),
            policy=self.policy,
            estimate_starts=False,
            cycle_interval_s=self.config.cycle_interval_s,
        )
        began = time.perf_counter()
        decisions = self.schedule_fn(snapshot)
        result.engine_s += time.perf_counter() - began
        result.cycles += 1
        if self.check_fn is not None:
            began = time.perf_counter()
            problems = self.check_fn(snapshot, decisions)
            result.check_s += time.perf_counter() - began
            if problems:
                result.invariant_violations += len(problems)
                result.invariant_examples.extend(problems[: _MAX_EXAMPLES - len(result.invariant_examples)])
        for preemption in decisions.preemptions:
            self._preempt(preemption.job_id, preemption.grace_period_s, now)
        for start in decisions.starts:
            self._start(start.job_id, start.placements, now)
        if self.pending:
            result.free_gpus_while_pending = self.free_total
        result.peak_allocated = max(result.peak_allocated, result.capacity - self.free_total)
        return bool(decisions.starts or decisions.preemptions)

    def _apply_error(self, message: str) -> None:
        """Count a decision the simulator could not apply (it is skipped)."""
        self.result.apply_errors += 1
        if len(self.result.apply_examples) < _MAX_EXAMPLES:
            self.result.apply_examples.append(message)

    def _start(self, job_id: int, placements: tuple[Placement, ...], now: float) -> None:
        """Apply a ``Start``: check the devices are free, bind them, schedule the completion."""
        job = self.pending.get(job_id)
        if job is None:
            self._apply_error(f"t={now:g}: start of job {job_id}, which is not pending")
            return
        total = 0.0
        for p in placements:
            free = self.free_share.get(p.gpu_id)
            if free is None or p.share > free + _EPS:
                self._apply_error(f"t={now:g}: job {job_id} placed on device {p.gpu_id}, which is not free")
                return
            total += p.share
        if abs(total - job.request) > 1e-6:
            self._apply_error(f"t={now:g}: job {job_id} asked for {job.request:g} GPUs, got {total:g}")
        for p in placements:
            self.free_share[p.gpu_id] -= p.share
        self.free_total -= job.request
        self._dequeue(job, now)
        models: dict[str, float] = {}
        for p in placements:
            model = self.model_of[p.gpu_id]
            models[model] = models.get(model, 0.0) + p.share
        job.models = models
        team = job.trace.team
        self.holdings.change(team, models, +1)
        for problem in self.holdings.over_limit(team, models):
            self.result.quota_violations += 1
            if len(self.result.quota_examples) < _MAX_EXAMPLES:
                self.result.quota_examples.append(f"t={now:g}: {problem}")
        self.ledger.change_held(team, now, job.request)
        job.placements = placements
        job.started_at = now
        if job.first_start is None:
            job.first_start = now
        job.attempt += 1
        self.running[job_id] = job
        job.info = self.views.running(job, now)
        if self.views.preemptible(job):
            _count(self.victims, self.views.priority(job), +1)
        run_for = job.overhead + job.remaining
        limit = self.views.time_limit(job)
        if limit is not None:
            run_for = min(run_for, limit)
        self._push(now + run_for, _COMPLETE, job)

    def _preempt(self, job_id: int, grace_s: float, now: float) -> None:
        """Apply a ``Preemption``: the victim stops working now and frees its devices after ``grace_s``."""
        job = self.running.get(job_id)
        if job is None or job.preempted_at is not None:
            self._apply_error(f"t={now:g}: preemption of job {job_id}, which is not running")
            return
        if self.views.preemptible(job):
            _count(self.victims, self.views.priority(job), -1)
        job.preempted_at = now
        job.preemptions += 1
        job.attempt += 1  # cancels its completion event
        self.result.preemptions += 1
        job.info = self.views.running(job, now)
        self._push(now + max(0.0, grace_s), _STOP, job)
        if grace_s <= 0:
            self.dirty = True

    def _push(self, at: float, kind: int, job: SimJob) -> None:
        """Schedule a timed event for the job's current attempt."""
        self.seq += 1
        heapq.heappush(self.heap, (at, self.seq, kind, job.trace.id, job.attempt))

    # -- results -------------------------------------------------------------------------------------

    def _finish(self, end: float) -> None:
        """Fill the result with per-job records and per-team integrals."""
        result = self.result
        ledger = self.ledger
        result.teams = {team: (ledger.contended_gpu_s[team], ledger.starved_s[team], ledger.longest_starved(team, end))
                        for team in ledger.teams}
        result.guaranteed = dict(ledger.guaranteed)
        result.end_s = end
        for job in self.running.values():  # still running when the replay stopped (--until)
            result.allocated_gpu_s += _clip(job.started_at, end, self.span) * job.request
            stop = job.preempted_at if job.preempted_at is not None else end
            result.useful_gpu_s += _clip(job.started_at + job.overhead, stop, self.span) * job.request
        for job in self.jobs.values():
            t = job.trace
            result.jobs.append(
                JobRecord(
                    id=t.id,
                    team=t.team,
                    submit=t.submit_time,
                    duration=t.duration,
                    gpus=job.request,
                    first_start=job.first_start,
                    end=job.end,
                    preemptions=job.preemptions,
                    lost_gpu_s=job.lost_gpu_s,
                    outcome=job.outcome or ("running" if job.trace.id in self.running else "pending"),
                )
            )
        result.unarrived = len(self.trace.jobs) - len(self.jobs)


def _count(counter: dict, key: object, delta: int) -> None:
    """Add ``delta`` to a multiset kept as {key: count}; drop keys that reach 0."""
    count = counter.get(key, 0) + delta
    if count:
        counter[key] = count
    else:
        del counter[key]


def _tick(t: float, interval: float) -> float:
    """The first cycle tick at or after ``t``."""
    return math.ceil(t / interval - 1e-12) * interval if interval > 0 else t


def _clip(start: float, end: float, span: float) -> float:
    """Length of ``[start, end)`` inside ``[0, span)``."""
    return max(0.0, min(end, span) - max(start, 0.0))


def simulate(
    trace: Trace,
    cluster: Cluster,
    setup: TeamSetup,
    policy: Policy,
    config: SimConfig = SimConfig(),
    **kwargs: object,
) -> SimResult:
    """Replay ``trace`` once; keyword arguments go to :class:`Simulator` (schedule_fn, check_fn, ...)."""
    return Simulator(trace, cluster, setup, policy, config, **kwargs).run()  # type: ignore[arg-type]
