"""What-if from Rota's own history: take the jobs submitted in a past period, the cluster, quotas and
priority classes as they are now, apply an admin's changes (quotas, weights, priorities, pool sizes),
replay the period twice through the simulator (which calls the real engine) — as configured and as
changed, each under a stored scheduling policy version (by default the active one for both; an admin may pick
any two, e.g. the active policy against a draft) — and compare both with what actually happened. Every
figure covers the period only: GPU time held after its end counts neither in the history nor in the replays.

How history becomes a trace: a job's duration is how long its last attempt ran (to its end, or to now
while it runs); a job that never started is replayed with its time limit as its duration when it has
one and is left out otherwise (counted in ``skipped``)."""

import dataclasses
from datetime import datetime, timedelta
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Count, Min, Q

from portal.governance.services import QUOTA_DEFAULTS, QuotaChange, quota_validate, quota_value_parse
from portal.models import Team
from scheduler.core.policies import PRESETS, policy_by_name
from scheduler.core.types import GpuDevice, NodeInfo, QuotaInfo
from scheduler.models import Allocation, Gpu, GpuModel, Job, Node, Pool, Preemption, PriorityClass, Quota
from scheduler.models.policies import PolicyVersion
from scheduler.models.whatif import WhatIfRun
from scheduler.selectors_policies import policy_active
from scheduler.services.common import db_now
from scheduler.sim.cluster import Cluster
from scheduler.sim.compare import team_outcomes
from scheduler.sim.metrics import summarize
from scheduler.sim.quotas import TeamSetup
from scheduler.sim.simulator import SimConfig, Simulator
from scheduler.sim.trace import Trace, TraceJob
from scheduler.snapshot import priority_class_infos, quota_infos, team_infos

MAX_PERIOD = timedelta(days=92)
MAX_SCALE = 10.0
PRIORITY_MIN, PRIORITY_MAX = -(2**31), 2**31 - 1  # PriorityClass.value's column, as the priority classes page
# The simulator's summary figures a replay keeps (names as ``scheduler.sim.metrics.summarize`` gives them).
SUMMARY_KEYS = ("jobs", "completed", "unfinished", "avg_jct_s", "avg_queue_s", "p95_queue_s", "utilization",
                "preemptions", "gpu_hours_lost", "quota_violations", "invariant_violations", "wall_s")


# -- validation and creation ---------------------------------------------------------------------------


def _clean_changes(changes: dict) -> dict:
    errors: dict[str, str] = {}
    if not isinstance(changes, dict):
        raise ValidationError({"changes": "must be an object with quotas, priorities and pool_scale"})
    unknown = set(changes) - {"quotas", "priorities", "pool_scale"}
    if unknown:
        errors["changes"] = f"unknown keys {sorted(unknown)}; allowed: quotas, priorities, pool_scale"
    teams = set(Team.objects.values_list("name", flat=True))
    models = set(GpuModel.objects.values_list("name", flat=True))
    quotas = []
    for i, row in enumerate(changes.get("quotas") or []):
        where = f"changes.quotas[{i}]"
        if not isinstance(row, dict) or row.get("team") not in teams or row.get("gpu_model") not in models:
            errors[where] = "needs a known team and gpu_model"
            continue
        clean = {"team": row["team"], "gpu_model": row["gpu_model"]}
        cell = f"{row['team']}/{row['gpu_model']}"
        for key in ("guaranteed", "limit", "weight"):
            if row.get(key) is None:  # left as it is today
                continue
            value, error = quota_value_parse(row[key], cell=cell, field=key)  # the quota page's own check
            if error:
                errors[f"changes.quotas.{cell}.{key}"] = error
            else:
                clean[key] = float(value)
        quotas.append(clean)
    if not any(key.startswith("changes.quotas") for key in errors):
        errors |= _quota_rules(quotas)
    classes = dict(PriorityClass.objects.values_list("name", "value"))
    priorities = {}
    for name, value in (changes.get("priorities") or {}).items():
        if name not in classes or not isinstance(value, int) or not PRIORITY_MIN <= value <= PRIORITY_MAX:
            errors[f"changes.priorities.{name}"] = (f"needs a known priority class and a whole number from "
                                                   f"{PRIORITY_MIN} to {PRIORITY_MAX}")
        else:
            priorities[name] = value
    merged = {**classes, **priorities}
    for name, value in sorted(priorities.items()):
        clash = sorted(other for other, v in merged.items() if v == value and other != name)
        if clash:  # as on the priority classes page: the order between two classes must be clear
            errors[f"changes.priorities.{name}"] = f"value {value} is already used by {', '.join(clash)}"
    pools = set(Pool.objects.values_list("name", flat=True))
    scale = {}
    for name, value in (changes.get("pool_scale") or {}).items():
        if name not in pools or not isinstance(value, int | float) or not 0 <= value <= MAX_SCALE:
            errors[f"changes.pool_scale.{name}"] = f"needs a known pool and a factor between 0 and {MAX_SCALE}"
        else:
            scale[name] = float(value)
    if errors:
        raise ValidationError(errors)
    return {"quotas": quotas, "priorities": priorities, "pool_scale": scale}


def _quota_rules(quotas: list[dict]) -> dict[str, str]:
    """The quota page's rules on today's quotas with ``quotas`` applied (fields left out keep today's value):
    limit at least guaranteed, each parent's guarantee covering its children's, values within bounds. Keys
    are ``changes.quotas.TEAM/MODEL.FIELD``."""
    current = {(q.team.name, q.gpu_model.name): q for q in
               Quota.objects.filter(pool__isnull=True).select_related("team", "gpu_model")}
    wanted = []
    for row in quotas:
        q = current.get((row["team"], row["gpu_model"]))
        values = {f: Decimal(str(row[f])) if f in row else (getattr(q, f) if q else QUOTA_DEFAULTS[f])
                  for f in ("guaranteed", "limit", "weight")}
        wanted.append(QuotaChange(team=row["team"], gpu_model=row["gpu_model"], updated_at=None, **values))
    return {f"changes.quotas.{key}": message for key, message in quota_validate(wanted).items()}


def _policy_versions(baseline: int | None, changed: int | None, errors: dict) -> tuple:
    """The stored versions both replays run under: ``baseline`` (default: the active version) and ``changed``
    (default: the baseline's), by id; (None, None) when no version is stored (the preset ``rota`` then)."""
    found = {v.pk: v for v in PolicyVersion.objects.select_related("policy").filter(
        pk__in=[pk for pk in (baseline, changed) if pk is not None])}
    for key, pk in (("baseline_policy", baseline), ("changed_policy", changed)):
        if pk is not None and pk not in found:
            errors[key] = f"no stored policy version has id {pk!r}"
    first = found.get(baseline) if baseline is not None else policy_active().version
    return first, found.get(changed) if changed is not None else first


def whatif_create(*, user, name: str, period_start: datetime, period_end: datetime, policy: str | None = None,
                  baseline_policy: int | None = None, changed_policy: int | None = None,
                  changes: dict | None = None) -> WhatIfRun:
    """Validate and queue a what-if (platform admins only). The replay runs in a Celery task.

    ``baseline_policy`` / ``changed_policy``: ids of the stored policy versions the replays "as configured" and
    "with the changes" run under (defaults: the active version, and the baseline's). ``policy``: a preset of
    ``scheduler.core.policies`` for both replays instead of stored versions."""
    if not user.is_staff:
        raise ValidationError({"user": "only platform admins run what-if replays"})
    errors = {}
    if not (name or "").strip():
        errors["name"] = "must not be empty"
    now = db_now()
    if period_start >= now:
        errors["period_start"] = (f"the period must start in the past (now is {now:%Y-%m-%d %H:%M} UTC): a replay "
                                  "re-runs the jobs that were submitted in it")
    if period_end <= period_start:
        errors["period_end"] = "the period must end after it starts"
    elif period_end - period_start > MAX_PERIOD:
        errors["period_end"] = f"the period may be at most {MAX_PERIOD.days} days"
    if policy is not None and policy not in PRESETS:
        errors["policy"] = f"must be one of {', '.join(PRESETS)}"
    if policy is not None and (baseline_policy is not None or changed_policy is not None):
        errors["policy"] = "give a preset or stored policy versions, not both"
    versions = (None, None) if policy is not None else _policy_versions(baseline_policy, changed_policy, errors)
    if errors:
        raise ValidationError(errors)
    clean = _clean_changes(changes or {})
    with transaction.atomic():
        run = WhatIfRun.objects.create(name=name.strip()[:120], created_by=user, period_start=period_start,
                                       period_end=period_end, policy=policy or ("" if versions[0] else "rota"),
                                       baseline_policy=versions[0], changed_policy=versions[1], changes=clean)
        from scheduler.tasks import whatif_run

        whatif_run.delay_on_commit(run_id=run.pk)
    return run


# -- history, cluster, quotas, classes as the simulator needs them ---------------------------------------


def history(start: datetime, end: datetime, now: datetime) -> tuple[Trace, dict[str, dict], dict[str, int]]:
    """The jobs submitted in ``[start, end)`` as a trace (t=0 at ``start``), what actually happened to
    them per team, and what was left out."""
    jobs = list(Job.objects.filter(created_at__gte=start, created_at__lt=end).select_related(
        "team", "gpu_model", "priority_class").annotate(
        first_admitted=Min("transitions__at", filter=Q(transitions__to_state="admitted"))).order_by("created_at", "id"))
    ids = [j.pk for j in jobs]
    allocs: dict[int, list[Allocation]] = {}
    for a in Allocation.objects.filter(job_id__in=ids).select_related("gpu__model").order_by("id"):
        allocs.setdefault(a.job_id, []).append(a)
    preempted = dict(Preemption.objects.filter(job_id__in=ids).values_list("job_id").annotate(n=Count("id")))
    trace_jobs, skipped = [], {"never-started-without-time-limit": 0}
    actual: dict[str, dict] = {}
    for job in jobs:
        team = job.team.name
        row = actual.setdefault(team, {"jobs": 0.0, "finished": 0.0, "waits": [], "gpu_hours": 0.0,
                                       "preemptions": 0.0})
        row["jobs"] += 1
        row["finished"] += 1 if job.is_final and job.started_at is not None else 0
        row["preemptions"] += preempted.get(job.pk, 0)
        if job.first_admitted is not None:
            row["waits"].append((job.first_admitted - job.created_at).total_seconds())
        mine = allocs.get(job.pk, [])
        for a in mine:  # GPU time held inside the period only
            held = (min(a.ended_at or now, end) - max(a.started_at, start)).total_seconds()
            row["gpu_hours"] += max(0.0, held) * a.share / 3600
        last = [a for a in mine if a.attempt == max((x.attempt for x in mine), default=0)]
        if last:
            duration = max(((a.ended_at or now) - a.started_at).total_seconds() for a in last)
            models = (last[0].gpu.model.name,)
        elif job.time_limit_minutes:
            duration = job.time_limit_minutes * 60.0
            models = (job.gpu_model.name,) if job.gpu_model else ()
        else:
            skipped["never-started-without-time-limit"] += 1
            continue
        trace_jobs.append(TraceJob(
            id=job.pk, submit_time=(job.created_at - start).total_seconds(), duration=max(1.0, duration),
            gpus=job.gpus, team=team, user=str(job.submitted_by_id), gpu_models=models, kind=job.kind,
            priority_class=job.priority_class.name,
            time_limit_s=job.time_limit_minutes * 60.0 if job.time_limit_minutes else None,
            gpu_fraction=float(job.gpu_fraction) if job.gpu_fraction is not None else None, name=job.name,
        ))
    for row in actual.values():
        waits = sorted(row.pop("waits"))
        row["avg_wait_s"] = sum(waits) / len(waits) if waits else 0.0
        row["p95_wait_s"] = waits[min(len(waits) - 1, int(0.95 * len(waits)))] if waits else 0.0
    trace = Trace(jobs=tuple(trace_jobs), source="rota history", format="rota", origin=start,
                  end=(end - start).total_seconds(), skipped={k: v for k, v in skipped.items() if v})
    return trace, actual, trace.skipped


def cluster_now(pool_scale: dict[str, float]) -> Cluster:
    """Today's nodes (every node with GPUs, whatever its state), each pool scaled by its factor: a factor
    of 1.5 on a pool of 2 nodes replays it with 3 (copies of its nodes, in order)."""
    nodes = list(Node.objects.select_related("pool").order_by("name"))
    gpus: dict[int, list[Gpu]] = {}
    for g in Gpu.objects.filter(present=True).select_related("model").order_by("index"):
        gpus.setdefault(g.node_id, []).append(g)
    by_pool: dict[str, list[Node]] = {}
    for node in nodes:
        if gpus.get(node.pk):
            by_pool.setdefault(node.pool.name, []).append(node)
    out, next_id = [], 1
    for pool, members in by_pool.items():
        count = round(len(members) * pool_scale.get(pool, 1.0))
        for k in range(count):
            node = members[k % len(members)]
            name = node.name if k < len(members) else f"{node.name}-whatif{k // len(members)}"
            devices = []
            for g in gpus[node.pk]:
                devices.append(GpuDevice(id=next_id, node=name, index=g.index, model=g.model.name,
                                         memory_mb=g.memory_mb, mig=g.model.is_mig_profile))
                next_id += 1
            out.append(NodeInfo(name=name, pool=pool, gpus=tuple(devices), labels=dict(node.labels or {}),
                                driver_version=node.driver_version, cuda_version=node.cuda_version))
    access = {p.name: frozenset(t.name for t in p.teams.all()) for p in Pool.objects.prefetch_related("teams")}
    return Cluster(nodes=tuple(out), pool_teams=access, description="Rota's cluster today")


def setup_now(quota_changes: list[dict]) -> TeamSetup:
    """Teams (with their pools and parents) and quotas as configured today, with the changes applied."""
    quotas = {(q.team, q.gpu_model, q.pool): q for q in quota_infos()}
    for change in quota_changes:
        key = (change["team"], change["gpu_model"], None)
        base = quotas.get(key) or QuotaInfo(team=change["team"], gpu_model=change["gpu_model"])
        updates = {k: change[k] for k in ("guaranteed", "limit", "weight") if k in change}
        quotas[key] = dataclasses.replace(base, **updates)
    return TeamSetup(teams=team_infos(), quotas=tuple(quotas.values()), source="rota")


# -- running ---------------------------------------------------------------------------------------


def whatif_execute(run_id: int, *, cycle_interval_s: float = 30.0) -> WhatIfRun:
    """Run a queued what-if: both replays with progress saved as they go, then the stored comparison.
    Safe to call twice: a run that is not queued is left alone."""
    if not WhatIfRun.objects.filter(pk=run_id, state=WhatIfRun.QUEUED).update(state=WhatIfRun.RUNNING):
        return WhatIfRun.objects.get(pk=run_id)
    run = WhatIfRun.objects.get(pk=run_id)
    try:
        now = db_now()
        trace, actual, skipped = history(run.period_start, run.period_end, now)
        policies = {label: version.to_policy() if version else policy_by_name(run.policy)
                    for label, version in (("baseline", run.baseline_policy), ("changed", run.changed_policy))}
        # The replay stops at the end of the period, like the history it is compared with.
        config = SimConfig(cycle_interval_s=cycle_interval_s, restart_cost_s=60.0,
                           until=(run.period_end - run.period_start).total_seconds())
        outputs = {}
        for step, (label, scale, quota_changes, priorities) in enumerate([
            ("baseline", {}, [], {}),
            ("changed", run.changes.get("pool_scale", {}), run.changes.get("quotas", []),
             run.changes.get("priorities", {})),
        ]):
            def progress(fraction: float, step=step) -> None:
                WhatIfRun.objects.filter(pk=run_id).update(progress=round((step + fraction) / 2, 3))

            result = Simulator(trace, cluster_now(scale), setup_now(quota_changes), policies[label], config,
                               priority_classes=priority_class_infos(priorities), progress=progress).run()
            summary = summarize(result)
            outputs[label] = {"teams": team_outcomes(result),
                              "summary": {k: summary.get(k) for k in SUMMARY_KEYS}}
        run.result = {"actual": actual, "baseline": outputs["baseline"]["teams"],
                      "changed": outputs["changed"]["teams"],
                      "summary": {"baseline": outputs["baseline"]["summary"],
                                  "changed": outputs["changed"]["summary"]},
                      "policies": {label: p.name for label, p in policies.items()},
                      "jobs_replayed": len(trace.jobs), "skipped": skipped}
        run.state, run.progress, run.finished_at = WhatIfRun.DONE, 1.0, db_now()
        run.save(update_fields=["result", "state", "progress", "finished_at"])
    except Exception as exc:  # a replay must never leave the run "running" forever
        WhatIfRun.objects.filter(pk=run_id).update(state=WhatIfRun.FAILED, error=f"{type(exc).__name__}: {exc}",
                                                   finished_at=db_now())
        raise
    return run
