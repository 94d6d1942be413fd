"""Queue metrics under Kueue's names, so dashboards and alerts written for Kueue read Rota too.

Kueue's cluster queue is Rota's team x GPU model: ``cluster_queue="<team>/<gpu model>"`` (``any`` for a job
that takes whichever model is free). The mapping:

* ``kueue_pending_workloads{cluster_queue, status}`` (gauge): waiting jobs; ``status="active"`` for those
  the scheduler considers (``pending``), ``"inadmissible"`` for those it may not admit until a person acts
  (``held``).
* ``kueue_admitted_workloads_total{cluster_queue}`` (counter): admissions ever made, one per admitted
  attempt (a requeued job admitted again counts again), from the job transitions.
* ``kueue_admission_wait_time_seconds{cluster_queue}`` (histogram): for each admission, the time since the
  attempt entered the queue (the transition before the admission).

One query each, reading the admissions alone (a partial index), not every transition; the wait histogram is
bucketed in PostgreSQL."""

from django.db import connection
from django.db.models import Count

from scheduler.metrics import _labels
from scheduler.models import GpuModel, Job, JobTransition
from scheduler.models.jobs import JobState

ANY_MODEL = "any"
# Kueue's wait-time buckets reach from a second to hours; Rota's users wait seconds to days.
WAIT_BUCKETS_S = (1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 24 * 3600)
PENDING_STATUS = {JobState.PENDING: "active", JobState.HELD: "inadmissible"}


def cluster_queue(team: str, model: str | None) -> str:
    """Kueue's cluster queue name for a team's jobs of one GPU model."""
    return f"{team}/{model or ANY_MODEL}"


def _pending_lines() -> list[str]:
    rows = (Job.objects.filter(state__in=list(PENDING_STATUS))
            .values_list("team__name", "gpu_model__name", "state").annotate(n=Count("id"))
            .order_by("team__name", "gpu_model__name", "state"))
    lines = ["# HELP kueue_pending_workloads Waiting jobs per cluster queue (team/GPU model): active are "
             "considered by the scheduler, inadmissible are held until a person releases them.",
             "# TYPE kueue_pending_workloads gauge"]
    for team, model, state, n in rows:
        labels = _labels(cluster_queue=cluster_queue(team, model), status=PENDING_STATUS[state])
        lines.append(f"kueue_pending_workloads{labels} {n}")
    return lines


def _admitted_lines() -> list[str]:
    rows = (JobTransition.objects.filter(to_state=JobState.ADMITTED)
            .values_list("job__team__name", "job__gpu_model__name")
            .annotate(n=Count("id")).order_by("job__team__name", "job__gpu_model__name"))
    lines = ["# HELP kueue_admitted_workloads_total Admissions per cluster queue (team/GPU model), one per "
             "admitted attempt.", "# TYPE kueue_admitted_workloads_total counter"]
    for team, model, n in rows:
        lines.append(f"kueue_admitted_workloads_total{_labels(cluster_queue=cluster_queue(team, model))} {n}")
    return lines


def _wait_sql() -> str:
    """Per team and GPU model: the count of admissions at or under each bucket, the count and the sum. Reads
    only the admissions (``transition_admitted_idx``) and, for each, the one transition before it (by
    ``at`` then ``id``, through ``transition_job_at_idx``), not every transition ever recorded."""
    buckets = ", ".join(f"count(*) FILTER (WHERE wait <= {b}) AS le_{i}" for i, b in enumerate(WAIT_BUCKETS_S))
    read = ", ".join(f"q.le_{i}" for i in range(len(WAIT_BUCKETS_S)))
    transitions = JobTransition._meta.db_table
    return f"""
        WITH waits AS (
            SELECT a.job_id, EXTRACT(EPOCH FROM a.at - before.at) AS wait
            FROM {transitions} a
            CROSS JOIN LATERAL (
                SELECT p.at FROM {transitions} p
                WHERE p.job_id = a.job_id AND (p.at, p.id) < (a.at, a.id)
                ORDER BY p.at DESC, p.id DESC LIMIT 1) before
            WHERE a.to_state = %s),
        per_queue AS (
            SELECT j.team_id, j.gpu_model_id, {buckets}, count(*) AS n, COALESCE(sum(wait), 0) AS total
            FROM waits w JOIN {Job._meta.db_table} j ON j.id = w.job_id
            GROUP BY j.team_id, j.gpu_model_id)
        SELECT t.name, m.name, {read}, q.n, q.total
        FROM per_queue q
        JOIN {Job._meta.get_field("team").related_model._meta.db_table} t ON t.id = q.team_id
        LEFT JOIN {GpuModel._meta.db_table} m ON m.id = q.gpu_model_id
        ORDER BY t.name, m.name"""


def _wait_rows() -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(_wait_sql(), [JobState.ADMITTED])
        return cursor.fetchall()


def _wait_lines() -> list[str]:
    name = "kueue_admission_wait_time_seconds"
    lines = [f"# HELP {name} Time from entering the queue to admission, per cluster queue (team/GPU model).",
             f"# TYPE {name} histogram"]
    for team, model, *counts in _wait_rows():
        queue = cluster_queue(team, model)
        *in_buckets, total, seconds = counts
        for bound, n in zip(WAIT_BUCKETS_S, in_buckets, strict=True):
            lines.append(f"{name}_bucket{_labels(cluster_queue=queue, le=f'{bound:g}')} {n}")
        lines.append(f"{name}_bucket{_labels(cluster_queue=queue, le='+Inf')} {total}")
        lines.append(f"{name}_sum{_labels(cluster_queue=queue)} {float(seconds):g}")
        lines.append(f"{name}_count{_labels(cluster_queue=queue)} {total}")
    return lines


def kueue_lines() -> list[str]:
    """The Kueue-named part of /metrics."""
    return _pending_lines() + _admitted_lines() + _wait_lines()
