"""The invariant auditor: read-only checks over the database that every fault, load and fuzz test runs.

``audit()`` returns one human-readable line per violation (an empty list means the state is sound):

- no GPU in two open exclusive allocations, and the open shares of one GPU never add up to more than 1000;
- no node over capacity (open shares on a node within its GPUs; an allocation's node is its GPU's node);
- no team above its quota limit per GPU model (and pool), counting the open shares of the team's subtree;
- every job in one valid state, with a transition history that starts at ``pending``, chains (each
  ``from_state`` is the previous ``to_state``), follows allowed edges and ends at the job's state;
- no open allocation for a waiting or finished job, nor for an attempt other than the job's current one;
- every holding job (admitted/starting/running) has open allocations of its current attempt;
- allocation intervals ordered (``started_at <= ended_at``);
- a completed preemption lost no more GPU-seconds than its attempt held after its ``work_since``, and no
  running job's checkpoint is in the future;
- the usage ledger equals the allocation intervals (accounting's reconciliation) once a rollup has run.

The checks use a fixed number of queries, so the auditor is cheap enough to run between test steps and
at the end of a 10,000-job load run. It never writes.
"""

from collections import defaultdict
from decimal import Decimal

from django.db import connection

from portal.dbrows import one_snapshot
from scheduler.models.jobs import FINAL_STATES, HOLDING_STATES, WAITING_STATES, JobState

STATES = {s.value for s in JobState}
HOLDING = {str(s) for s in HOLDING_STATES}
WAITING = {str(s) for s in WAITING_STATES}
FINAL = {str(s) for s in FINAL_STATES}

# The job state machine (DESIGN.md, "Job states"): every recorded transition must be one of these edges.
# A holding job may return to ``pending`` (preempted, requeued after a lost node, a restarted service).
ALLOWED_EDGES: dict[str, set[str]] = {
    "": {"pending"},
    "pending": {"admitted", "held", "cancelled"},
    "held": {"pending", "cancelled"},
    "admitted": {"starting", "running", "pending"} | FINAL,
    "starting": {"running", "pending"} | FINAL,
    "running": {"pending"} | FINAL,
    **{s: set() for s in FINAL},
}

MAX_FINDINGS_PER_CHECK = 50  # a badly broken database yields a readable report, not a million lines


def _rows(sql: str, params: list | None = None) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params or [])
        return cursor.fetchall()


def _capped(findings: list[str]) -> list[str]:
    if len(findings) <= MAX_FINDINGS_PER_CHECK:
        return findings
    return findings[:MAX_FINDINGS_PER_CHECK] + [f"... and {len(findings) - MAX_FINDINGS_PER_CHECK} more"]


def check_gpus() -> list[str]:
    """No GPU in two open exclusive allocations; open shares of one GPU at most 1000 thousandths."""
    rows = _rows(
        """
        SELECT gpu_id, COUNT(*) FILTER (WHERE share_milli = 1000), SUM(share_milli), ARRAY_AGG(job_id ORDER BY id)
          FROM scheduler_allocation WHERE ended_at IS NULL GROUP BY gpu_id
        HAVING COUNT(*) FILTER (WHERE share_milli = 1000) > 1 OR SUM(share_milli) > 1000
        """
    )
    return _capped([
        f"gpu {gpu}: {exclusive} open exclusive allocations, shares sum to {total}/1000 (jobs {jobs})"
        for gpu, exclusive, total, jobs in rows
    ])


def check_nodes() -> list[str]:
    """Open allocations sit on their GPU's node, on present GPUs, within the node's GPU capacity."""
    findings = [
        f"allocation {alloc} of job {job}: on node {node} but its gpu {gpu} belongs to node {gpu_node}"
        for alloc, job, node, gpu, gpu_node in _rows(
            """
            SELECT a.id, a.job_id, a.node_id, a.gpu_id, g.node_id FROM scheduler_allocation a
              JOIN scheduler_gpu g ON g.id = a.gpu_id WHERE a.ended_at IS NULL AND a.node_id <> g.node_id
            """
        )
    ]
    findings += [
        f"node {name}: open shares {held}/1000 exceed its {gpus} GPUs"
        for name, held, gpus in _rows(
            """
            SELECT n.name, SUM(a.share_milli),
                   (SELECT COUNT(*) FROM scheduler_gpu g WHERE g.node_id = n.id)
              FROM scheduler_allocation a JOIN scheduler_node n ON n.id = a.node_id
             WHERE a.ended_at IS NULL GROUP BY n.id, n.name
            HAVING SUM(a.share_milli) > 1000 * (SELECT COUNT(*) FROM scheduler_gpu g WHERE g.node_id = n.id)
            """
        )
    ]
    return _capped(findings)


def check_quotas() -> list[str]:
    """No team (counting its subtree) holds more of a GPU model (in a pool, or any pool) than its limit."""
    parent = dict(_rows("SELECT id, parent_id FROM portal_team"))
    names = dict(_rows("SELECT id, name FROM portal_team"))
    held: dict[tuple[int, int, int], int] = defaultdict(int)  # (team, model, pool) -> thousandths
    for team, model, pool, milli in _rows(
        """
        SELECT j.team_id, g.model_id, n.pool_id, SUM(a.share_milli) FROM scheduler_allocation a
          JOIN scheduler_job j ON j.id = a.job_id JOIN scheduler_gpu g ON g.id = a.gpu_id
          JOIN scheduler_node n ON n.id = a.node_id
         WHERE a.ended_at IS NULL GROUP BY j.team_id, g.model_id, n.pool_id
        """
    ):
        seen = set()
        while team is not None and team not in seen:  # charge the team and each ancestor
            seen.add(team)
            held[(team, model, pool)] += milli
            team = parent.get(team)
    findings = []
    for team, model, model_name, pool, limit in _rows(
        """
        SELECT q.team_id, q.gpu_model_id, m.name, q.pool_id, q."limit" FROM scheduler_quota q
          JOIN scheduler_gpumodel m ON m.id = q.gpu_model_id WHERE q."limit" IS NOT NULL
        """
    ):
        total = sum(v for (t, m, p), v in held.items() if t == team and m == model and (pool is None or p == pool))
        if Decimal(total) / 1000 > limit:
            where = f" in pool {pool}" if pool is not None else ""
            findings.append(f"team {names.get(team)}: holds {Decimal(total) / 1000} {model_name}{where}, "
                            f"over its limit {limit}")
    return _capped(findings)


def check_jobs() -> list[str]:
    """Valid states and a history that starts at pending, chains over allowed edges, ends at the state."""
    jobs = {pk: (state, finished) for pk, state, finished in _rows(
        "SELECT id, state, finished_at IS NOT NULL FROM scheduler_job")}
    findings = [f"job {pk}: invalid state {state!r}" for pk, (state, _) in jobs.items() if state not in STATES]
    findings += [f"job {pk}: {state} but no finished_at" for pk, (state, finished) in jobs.items()
                 if state in FINAL and not finished]
    history: dict[int, list[tuple[str, str]]] = defaultdict(list)
    for job_id, from_state, to_state in _rows(
        "SELECT job_id, from_state, to_state FROM scheduler_jobtransition ORDER BY job_id, id"
    ):
        history[job_id].append((from_state, to_state))
    for pk, (state, _) in jobs.items():
        steps = history.get(pk)
        if not steps:
            findings.append(f"job {pk}: {state} with no recorded transitions")
            continue
        previous = ""
        for from_state, to_state in steps:
            if from_state != previous:
                findings.append(f"job {pk}: transition {from_state or '∅'}→{to_state} does not follow "
                                f"{previous or '∅'}")
            elif to_state not in ALLOWED_EDGES.get(from_state, set()):
                findings.append(f"job {pk}: transition {from_state or '∅'}→{to_state} is not allowed")
            previous = to_state
        if previous != state:
            findings.append(f"job {pk}: state {state} but its last transition went to {previous}")
    return _capped(findings)


def check_allocations() -> list[str]:
    """Open allocations belong to holding jobs' current attempts; holding jobs hold something; intervals
    are ordered."""
    findings = [
        f"job {job}: {state} with open allocation {alloc}" for alloc, job, state in _rows(
            """
            SELECT a.id, j.id, j.state FROM scheduler_allocation a JOIN scheduler_job j ON j.id = a.job_id
             WHERE a.ended_at IS NULL AND j.state <> ALL(%s)
            """,
            [sorted(HOLDING)],
        )
    ]
    findings += [
        f"job {job}: open allocation {alloc} of attempt {attempt}, but the job is on attempt {current}"
        for alloc, job, attempt, current in _rows(
            """
            SELECT a.id, j.id, a.attempt, j.attempt FROM scheduler_allocation a JOIN scheduler_job j ON j.id = a.job_id
             WHERE a.ended_at IS NULL AND a.attempt <> j.attempt AND j.state = ANY(%s)
            """,
            [sorted(HOLDING)],
        )
    ]
    findings += [
        f"job {job}: {state} (attempt {attempt}) without an open allocation" for job, state, attempt in _rows(
            """
            SELECT j.id, j.state, j.attempt FROM scheduler_job j WHERE j.state = ANY(%s) AND NOT EXISTS (
              SELECT 1 FROM scheduler_allocation a
               WHERE a.job_id = j.id AND a.attempt = j.attempt AND a.ended_at IS NULL)
            """,
            [sorted(HOLDING)],
        )
    ]
    findings += [
        f"allocation {alloc} of job {job}: ends {ended} before it starts {started}"
        for alloc, job, started, ended in _rows(
            "SELECT id, job_id, started_at, ended_at FROM scheduler_allocation WHERE ended_at < started_at"
        )
    ]
    return _capped(findings)


def check_lost_work() -> list[str]:
    """The work a completed preemption lost (``scheduler.checkpoints``) fits in what its attempt held after its
    last checkpoint; no running job's checkpoint is in the future."""
    findings = [
        f"preemption {pk} of job {job}: {lost:.3f} GPU-s lost, but attempt {attempt} held {held:.3f} GPU-s after "
        f"its checkpoint" for pk, job, attempt, lost, held in _rows(
            """
            SELECT p.id, p.job_id, p.attempt, p.gpu_seconds_lost, COALESCE(SUM(a.share_milli / 1000.0
                   * GREATEST(0, EXTRACT(EPOCH FROM a.ended_at - GREATEST(a.started_at, p.work_since)))), 0)
              FROM scheduler_preemption p
              LEFT JOIN scheduler_allocation a ON a.job_id = p.job_id AND a.attempt = p.attempt
             WHERE p.completed_at IS NOT NULL
             GROUP BY p.id HAVING p.gpu_seconds_lost > 0.001 + COALESCE(SUM(a.share_milli / 1000.0
                   * GREATEST(0, EXTRACT(EPOCH FROM a.ended_at - GREATEST(a.started_at, p.work_since)))), 0)
            """
        )
    ]
    findings += [
        f"job {job}: checkpoint {at:%Y-%m-%d %H:%M:%S} is in the future" for job, at in _rows(
            """
            SELECT id, last_checkpoint_at FROM scheduler_job
             WHERE state = 'running' AND last_checkpoint_at > clock_timestamp()
            """
        )
    ]
    return _capped(findings)


def check_ledger() -> list[str]:
    """GPU-seconds in the usage ledger equal allocation intervals × share, and its summed days equal its hourly
    rows (skipped before any rollup)."""
    from accounting.models import RollupState
    from accounting.services import usage_days_check, usage_reconcile

    if not RollupState.objects.filter(key="usage", rolled_until__isnull=False).exists():
        return []
    findings = usage_days_check()
    result = usage_reconcile()
    if not result.ok:
        findings.insert(0, f"usage ledger {result.ledger_gpu_seconds} GPU-s but allocations held "
                           f"{result.held_gpu_seconds} GPU-s up to {result.until:%Y-%m-%d %H:%M:%S} "
                           f"(difference {result.difference})")
    return _capped(findings)


CHECKS = {
    "gpus": check_gpus,
    "nodes": check_nodes,
    "quotas": check_quotas,
    "jobs": check_jobs,
    "allocations": check_allocations,
    "lost_work": check_lost_work,
    "ledger": check_ledger,
}


def audit(*, ledger: bool = True, only: list[str] | None = None) -> list[str]:
    """Every violation found, as ``"<check>: <what>"`` lines; empty when the database is sound. ``ledger``
    False skips the ledger reconciliation (while allocations change concurrently it can lag a rollup)."""
    findings = []
    with one_snapshot():  # one moment: work committed between two checks' queries never looks broken
        for name, check in CHECKS.items():
            if (only and name not in only) or (name == "ledger" and not ledger):
                continue
            findings += [f"{name}: {line}" for line in check()]
    return findings
