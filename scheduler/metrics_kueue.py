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

The counter and the histogram read ``AdmissionTally``, a row per queue that the cycle adds each admission to
as it makes it (``admissions_tally``), so a scrape costs the same after a million admissions as after ten."""

from django.db import connection
from django.db.models import Count

from scheduler.metrics import _labels
from scheduler.models import AdmissionTally, Job, JobTransition
from scheduler.models.jobs import JobState

ANY_MODEL = "any"
# Kueue's wait-time buckets reach from a second to hours; Rota's users wait seconds to days.
WAIT_BUCKETS_S = AdmissionTally.WAIT_BOUNDS_S
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


def _wait_sql() -> str:
    """Add the admissions of one cycle (``%(at)s``, ``%(jobs)s``) to their queues' tallies, in one statement:
    each admission's wait is the time since the transition before it (by ``at`` then ``id``, through
    ``transition_job_at_idx``), summed and counted at or under each bound per team and GPU model."""
    bounds = AdmissionTally.WAIT_BOUNDS_S
    columns = AdmissionTally.bucket_columns()
    counted = ", ".join(f"count(*) FILTER (WHERE w.wait <= {b})" for b in bounds)
    added = ", ".join(f"{c} = t.{c} + EXCLUDED.{c}" for c in columns)
    transitions = JobTransition._meta.db_table
    return f"""
        INSERT INTO {AdmissionTally._meta.db_table} AS t
            (team_id, gpu_model_id, admitted, wait_sum_s, {", ".join(columns)})
        SELECT j.team_id, j.gpu_model_id, count(*), COALESCE(sum(w.wait), 0), {counted}
        FROM (SELECT a.job_id, EXTRACT(EPOCH FROM a.at - before.at)::float AS wait
              FROM {transitions} a
              CROSS JOIN LATERAL (
                  SELECT p.at FROM {transitions} p
                  WHERE p.job_id = a.job_id AND (p.at, p.id) < (a.at, a.id)
                  ORDER BY p.at DESC, p.id DESC LIMIT 1) before
              WHERE a.to_state = %(admitted)s AND a.at = %(at)s AND a.job_id = ANY(%(jobs)s)) w
        JOIN {Job._meta.db_table} j ON j.id = w.job_id
        GROUP BY j.team_id, j.gpu_model_id
        ON CONFLICT (team_id, gpu_model_id) DO UPDATE SET
            admitted = t.admitted + EXCLUDED.admitted, wait_sum_s = t.wait_sum_s + EXCLUDED.wait_sum_s, {added}"""


def admissions_tally(job_ids, at) -> None:
    """Count the admissions the cycle just recorded at ``at`` for ``job_ids`` (one statement; call it in the
    transaction that wrote them)."""
    if job_ids:
        with connection.cursor() as cursor:
            cursor.execute(_wait_sql(), {"admitted": JobState.ADMITTED, "at": at, "jobs": list(job_ids)})


def _tallies() -> list[tuple]:
    return list(AdmissionTally.objects.order_by("team__name", "gpu_model__name").values_list(
        "team__name", "gpu_model__name", "admitted", "wait_sum_s", *AdmissionTally.bucket_columns()))


def _admitted_lines(tallies: list[tuple]) -> list[str]:
    lines = ["# HELP kueue_admitted_workloads_total Admissions per cluster queue (team/GPU model), one per "
             "admitted attempt.", "# TYPE kueue_admitted_workloads_total counter"]
    for team, model, n, *_rest in tallies:
        lines.append(f"kueue_admitted_workloads_total{_labels(cluster_queue=cluster_queue(team, model))} {n}")
    return lines


def _wait_lines(tallies: list[tuple]) -> list[str]:
    name = "kueue_admission_wait_time_seconds"
    lines = [f"# HELP {name} Time from entering the queue to admission, per cluster queue (team/GPU model).",
             f"# TYPE {name} histogram"]
    for team, model, total, seconds, *in_buckets in tallies:
        queue = cluster_queue(team, model)
        for bound, n in zip(WAIT_BUCKETS_S, in_buckets, strict=True):
            lines.append(f"{name}_bucket{_labels(cluster_queue=queue, le=f'{bound:g}')} {n}")
        lines.append(f"{name}_bucket{_labels(cluster_queue=queue, le='+Inf')} {total}")
        lines.append(f"{name}_sum{_labels(cluster_queue=queue)} {float(seconds):g}")
        lines.append(f"{name}_count{_labels(cluster_queue=queue)} {total}")
    return lines


def kueue_lines() -> list[str]:
    """The Kueue-named part of /metrics."""
    tallies = _tallies()
    return _pending_lines() + _admitted_lines(tallies) + _wait_lines(tallies)
