"""What would make a pending job start: its reason as the engine gives it now, and the smallest changes
after which it would start now or sooner, each found by running the real engine (``trial``) on a copy of
the snapshot with the change applied. Read-only; ``job_resubmit`` applies a change the owner picks.

The changes tried, one at a time:
- ``gpus``: the most GPUs below the request that start now (fewer GPUs are never harder to place or to fit
  in quota, so a binary search finds it);
- ``gpu_model`` / ``pool``: another GPU model the team has quota for, another pool the team may use;
- ``time_limit_minutes``: the longest shorter time limit that starts now (a backfill hole);
- ``quota``: the fewest extra GPUs of quota (a quota loan from another team, or a raise) that start it now;
- ``wait``: nothing changed, when the engine estimates a start (running jobs' time limits).
"""

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime

from scheduler.core import reasons as R
from scheduler.core.types import JobInfo, QuotaInfo, Snapshot
from scheduler.models import Job
from scheduler.models.jobs import JobState
from scheduler.services.common import db_now
from scheduler.services.trial import Outcome, trial
from scheduler.snapshot import build_snapshot, job_info

# The changes a resubmit may apply (a quota change is not the job's to make: it needs a loan or an admin).
RESUBMIT_FIELDS = ("gpus", "gpu_model", "pool", "time_limit_minutes")
QUOTA_CODES = (R.QUOTA_EXCEEDED, R.OVER_LIMIT, R.NON_PREEMPTIBLE_OVER_QUOTA)
BACKFILL_CODES = (R.PRIORITY, R.RESOURCES)  # waits where a shorter job may fit before a reservation
WAITING = (JobState.PENDING, JobState.HELD)


def _at(ts: float | None) -> datetime | None:
    return datetime.fromtimestamp(ts, tz=UTC) if ts is not None else None


def _largest(low: int, high: int, starts: Callable[[int], bool]) -> int | None:
    """The largest ``n`` in ``[low, high]`` for which ``starts(n)``, assuming it holds for every smaller
    one once it holds; None when it holds for none."""
    if high < low or not starts(low):
        return None
    while low < high:
        mid = (low + high + 1) // 2
        if starts(mid):
            low = mid
        else:
            high = mid - 1
    return low


def _smallest(low: int, high: int, starts: Callable[[int], bool]) -> int | None:
    """The smallest ``n`` in ``[low, high]`` for which ``starts(n)`` (monotone, as ``_largest``)."""
    if high < low or not starts(high):
        return None
    while low < high:
        mid = (low + high) // 2
        if starts(mid):
            high = mid
        else:
            low = mid + 1
    return low


def _with_quota(snapshot: Snapshot, team: str, model: str, extra: int) -> Snapshot:
    """``snapshot`` with ``team``'s any-pool quota of ``model`` raised by ``extra`` GPUs (guarantee and limit)."""
    rows, found = [], False
    for q in snapshot.quotas:
        if q.team == team and q.gpu_model == model and q.pool is None:
            found = True
            q = dataclasses.replace(q, guaranteed=q.guaranteed + extra,
                                    limit=None if q.limit is None else q.limit + extra)
        rows.append(q)
    if not found:
        rows.append(QuotaInfo(team=team, gpu_model=model, guaranteed=extra, limit=extra))
    return dataclasses.replace(snapshot, quotas=tuple(rows))


class _Explainer:
    """The trials for one job on one snapshot."""

    def __init__(self, snapshot: Snapshot, info: JobInfo):
        self.snapshot, self.info = snapshot, info
        self.baseline = trial(snapshot, info)
        self.suggestions: list[dict] = []

    def run(self, changes: dict, snapshot: Snapshot | None = None) -> Outcome:
        fields = {"gpu_models" if k == "gpu_model" else k: v for k, v in changes.items()}
        return trial(snapshot or self.snapshot, dataclasses.replace(self.info, **fields))

    def better(self, outcome: Outcome) -> bool:
        """Whether ``outcome`` starts now, or sooner than the job as it is."""
        if outcome.start is not None:
            return True
        est = outcome.pending.estimated_start if outcome.pending else None
        base = self.baseline.pending.estimated_start if self.baseline.pending else None
        return est is not None and (base is None or est < base)

    def suggest(self, change: dict, text: str, outcome: Outcome) -> None:
        est = self.snapshot.now if outcome.start is not None else outcome.pending.estimated_start
        self.suggestions.append({"change": change, "description": text, "starts_now": outcome.start is not None,
                                 "estimated_start": _at(est),
                                 "resubmit": all(k in RESUBMIT_FIELDS for k in change)})

    def fewer_gpus(self) -> None:
        job = self.info
        if job.gpu_fraction or job.gpus < 2:
            return
        step = job.nodes or 1  # a gang keeps its nodes: the count stays divisible by them

        def starts(n: int) -> bool:
            return self.run({"gpus": n * step}).start is not None

        n = _largest(1, job.gpus // step - 1, starts)
        if n is not None:
            gpus = n * step
            self.suggest({"gpus": gpus}, f"ask for {gpus} GPU{'s' if gpus > 1 else ''} instead of {job.gpus}",
                         self.run({"gpus": gpus}))

    def other_models(self) -> None:
        job = self.info
        if not job.gpu_models:  # any model already
            return
        models = sorted({q.gpu_model for q in self.snapshot.quotas if q.team == job.team} - set(job.gpu_models))
        for model in models:
            outcome = self.run({"gpu_model": (model,)})
            if self.better(outcome):
                self.suggest({"gpu_model": model}, f"run on {model} instead of {', '.join(job.gpu_models)}", outcome)

    def other_pools(self) -> None:
        job = self.info
        if job.pool is None:  # any pool already
            return
        team = next((t for t in self.snapshot.teams if t.name == job.team), None)
        for pool in sorted((team.pools or ()) if team else ()):
            if pool == job.pool:
                continue
            outcome = self.run({"pool": pool})
            if self.better(outcome):
                self.suggest({"pool": pool}, f"run in pool {pool} instead of {job.pool}", outcome)

    def shorter_limit(self, most_minutes: int) -> None:
        reason = self.baseline.pending.reason if self.baseline.pending else None
        if reason is None or reason.code not in BACKFILL_CODES:
            return  # a time limit changes where a job fits in time, not its quota
        current = int(self.info.time_limit_s // 60) if self.info.time_limit_s else most_minutes + 1

        def starts(minutes: int) -> bool:
            return self.run({"time_limit_s": minutes * 60.0}).start is not None

        minutes = _largest(1, current - 1, starts)
        if minutes is not None:
            self.suggest({"time_limit_minutes": minutes},
                         f"set the time limit to {minutes} min: it fits in the GPUs idle until a reserved start",
                         self.run({"time_limit_s": minutes * 60.0}))

    def more_quota(self) -> None:
        reason = self.baseline.pending.reason if self.baseline.pending else None
        if reason is None or reason.code not in QUOTA_CODES:
            return
        team, model = str(reason.details.get("team", self.info.team)), reason.details.get("gpu_model")
        if not model:
            return
        need = max(1, int(self.info.gpus))

        def starts(extra: int) -> bool:
            return self.run({}, _with_quota(self.snapshot, team, str(model), extra)).start is not None

        extra = _smallest(1, need, starts)
        if extra is not None:
            self.suggest({"quota": {"team": team, "gpu_model": model, "extra_gpus": extra}},
                         f"team {team} gets {extra} more {model} GPU{'s' if extra > 1 else ''} of quota "
                         "(a quota loan from another team, or a platform admin's raise)",
                         self.run({}, _with_quota(self.snapshot, team, str(model), extra)))

    def waiting(self) -> None:
        pending = self.baseline.pending
        if pending is not None and pending.estimated_start is not None:
            self.suggest({"wait": True}, "wait: the engine's estimate from the running jobs' time limits",
                         self.baseline)


def job_explain(*, job: Job) -> dict:
    """``{"reason": {...}, "would_start_if": [...]}`` for ``job`` (the caller has checked access). A job
    that does not wait has no reason and no suggestions."""
    from scheduler.services.jobs import MAX_TIME_LIMIT_MINUTES

    if job.state not in WAITING:
        return {"state": job.state, "reason": None, "would_start_if": []}
    now = db_now()
    snapshot, _gpu_nodes = build_snapshot(now)
    job = Job.objects.select_related("team", "submitted_by", "priority_class", "gpu_model", "pool").get(pk=job.pk)
    x = _Explainer(snapshot, job_info(job))
    start, pending = x.baseline
    if start is not None:
        reason = {"code": "Scheduling", "message": "it starts at the next scheduling cycle", "details": {},
                  "queue_position": None, "estimated_start": now}
    else:
        reason = {"code": pending.reason.code, "message": pending.reason.message,
                  "details": dict(pending.reason.details), "queue_position": pending.queue_position,
                  "estimated_start": _at(pending.estimated_start)}
        if pending.reason.code != "BudgetExceeded":
            x.fewer_gpus()
            x.other_models()
            x.other_pools()
            x.shorter_limit(MAX_TIME_LIMIT_MINUTES)
            x.more_quota()
            x.waiting()
    if job.state == JobState.HELD:
        reason["held"] = job.pending_reason_message
    return {"state": job.state, "reason": reason, "would_start_if": x.suggestions}
