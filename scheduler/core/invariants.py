"""``check_invariants(snapshot, decisions)``: the rules every cycle must keep, as readable violations.

Used by the hypothesis suite, the simulator and (cheaply) by the live cycle. It re-derives everything
from the snapshot and the decisions, sharing no code with the engine's search, so a bug in one is not
hidden by the same bug in the other.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from operator import attrgetter

from scheduler.core import reasons as R
from scheduler.core.cluster import version_tuple
from scheduler.core.loans import with_loans
from scheduler.core.plugins.priority import ranked
from scheduler.core.types import HELD, PENDING, RUNNING, Decisions, JobInfo, Snapshot

EPS = 1e-6
_CODES = frozenset(R.ALL_CODES)
_job_id_of = attrgetter("job_id")
_code_of = attrgetter("reason.code")


def check_invariants(snapshot: Snapshot, decisions: Decisions) -> list[str]:
    """Return human-readable violations of the scheduling invariants (empty list: none).

    Checked: no device share above 1.0 (victims of this cycle's preemptions still hold theirs); starts
    only on schedulable nodes and healthy devices of an accepted model, memory, pool, labels and driver;
    whole gangs only (the requested GPU count, exactly ``nodes`` nodes when given); no team or parent
    above a limit it was within; no model used without quota; non-preemptible work within guaranteed;
    every waiting job not started has exactly one reason; preemptions only of running, preemptible,
    non-terminating jobs of lower priority (unless reclaim; priority is the LAS rank when the policy has
    service levels) of the same team (unless reclaim, or the policy's preemption scope is the cluster),
    and the preemptor waits as ``Preempting``.
    """
    snapshot = ranked(with_loans(snapshot))
    out: list[str] = []
    devices, team_pools, parent, rows = _indexed(snapshot)
    jobs: dict[int, JobInfo] = {}
    waiting: list[JobInfo] = []  # pending and held
    held_jobs: list[JobInfo] = []
    used_before: dict[tuple, float] = defaultdict(float)
    held: dict[tuple, float] = defaultdict(float)  # (team, model, pool) -> GPUs held before the cycle
    held_np: dict[tuple, float] = defaultdict(float)  # the same, of non-preemptible jobs
    whole: list[int] = []  # devices held whole (share 1), once per holder
    shared = False  # some placement holds a share other than 1
    for job in snapshot.jobs:  # one pass: the snapshot may hold tens of thousands of jobs
        jobs[job.id] = job
        if job.placements:
            hit = _holding(job, devices)
            whole.extend(hit[1])
            shared = shared or hit[2]
            for key, amount in hit[3]:
                held[key] += amount
                if not job.preemptible:
                    held_np[key] += amount
        if job.state == PENDING:
            waiting.append(job)
        elif job.state == HELD:
            waiting.append(job)
            held_jobs.append(job)
    for (team, model, pool), amount in held.items():
        _charge(used_before, team, model, pool, amount, parent)
    used_after = defaultdict(float, used_before)
    started: set[int] = set()
    touched_rows: set[tuple] = set()

    for start in decisions.starts:
        if start.job_id not in jobs:
            out.append(f"start of unknown job {start.job_id}")
            continue
        job = jobs[start.job_id]
        if start.job_id in started:
            out.append(f"job {job.id} started twice")
        started.add(job.id)
        if job.state != PENDING:
            out.append(f"job {job.id} started but its state is {job.state}")
        out.extend(_check_start(job, start.placements, devices, team_pools, rows))
        for p in start.placements:
            if p.share == 1.0:
                whole.append(p.gpu_id)
            else:
                shared = True
            if p.gpu_id in devices:
                node, gpu = devices[p.gpu_id]
                for key in _charge(used_after, job.team, gpu.model, node.pool, p.share, parent):
                    touched_rows.add(key)

    if shared or len(set(whole)) != len(whole):  # else every device is held once, whole
        share: dict[int, float] = defaultdict(float)
        for placements in [j.placements for j in snapshot.jobs] + [s.placements for s in decisions.starts]:
            for p in placements:
                share[p.gpu_id] += p.share
        for gpu_id, s in sorted((gpu_id, s) for gpu_id, s in share.items() if s > 1.0 + EPS):
            out.append(f"device {gpu_id} is over-committed: share {s:.3f} > 1")
    for key in sorted(touched_rows, key=str):
        row = rows.get(key)
        if row is None or row.limit is None:
            continue
        if used_after[key] > row.limit + EPS and used_after[key] > used_before[key] + EPS:
            team, model, pool = key
            where = f" in pool {pool}" if pool else ""
            out.append(f"team {team} holds {used_after[key]:g} {model}{where} above its limit {row.limit:g}")

    out.extend(_check_non_preemptible(decisions, jobs, devices, rows, held_np))
    out.extend(_check_pending(decisions, waiting, held_jobs, started))
    out.extend(_check_preemptions(snapshot, decisions, jobs, started))
    return out


def _holding(job: JobInfo, devices: dict) -> tuple:
    """What a job's placements hold: (the job, devices it holds whole, whether it holds any other share,
    ((team, model, pool), GPUs) per quota scope). Kept for the next check of the same job object."""
    whole = []
    shared = False
    amounts: dict[tuple, float] = defaultdict(float)
    for p in job.placements:
        if p.share == 1.0:
            whole.append(p.gpu_id)
        else:
            shared = True
        dev = devices.get(p.gpu_id)
        if dev is not None:
            amounts[(job.team, dev[1].model, dev[0].pool)] += p.share
    return job, tuple(whole), shared, tuple(amounts.items())


def _indexed(snapshot: Snapshot) -> tuple[dict, dict, dict, dict]:
    """Devices by id (with their node), team pools, parents and quota rows of ``snapshot``."""
    return (
        {g.id: (n, g) for n in snapshot.nodes for g in n.gpus},
        {t.name: t.pools for t in snapshot.teams if t.pools is not None},
        {t.name: t.parent for t in snapshot.teams},
        {(q.team, q.gpu_model, q.pool): q for q in snapshot.quotas},
    )


def _charge(used, team, model, pool, amount, parent) -> list[tuple]:
    """Add ``amount`` to every quota scope of team and ancestors; return the keys touched."""
    keys = []
    seen = set()
    t = team
    while t is not None and t not in seen:
        seen.add(t)
        for key in ((t, model, None), (t, model, pool)):
            used[key] += amount
            keys.append(key)
        t = parent.get(t)
    return keys


def _check_start(job: JobInfo, placements, devices, team_pools, rows) -> list[str]:
    out = []
    if not placements:
        return [f"job {job.id} started with no devices"]
    nodes_used: dict[str, int] = defaultdict(int)
    fraction = job.gpu_fraction if job.gpu_fraction is not None and job.gpu_fraction < 1.0 - 1e-9 else None
    for p in placements:
        if p.gpu_id not in devices:
            out.append(f"job {job.id} started on unknown device {p.gpu_id}")
            continue
        node, gpu = devices[p.gpu_id]
        nodes_used[node.name] += 1
        if not node.schedulable:
            out.append(f"job {job.id} started on unschedulable node {node.name}")
        if not gpu.healthy:
            out.append(f"job {job.id} started on unhealthy device {gpu.id} of {node.name}")
        if job.gpu_models and gpu.model not in job.gpu_models:
            out.append(f"job {job.id} started on {gpu.model}, not one of {', '.join(job.gpu_models)}")
        if not job.gpu_models and gpu.mig:
            out.append(f"job {job.id} asked for any GPU model and started on MIG slice {gpu.model}")
        if gpu.memory_mb < job.gpu_memory_mb:
            out.append(f"job {job.id} needs {job.gpu_memory_mb} MiB GPUs, got {gpu.memory_mb} on device {gpu.id}")
        if job.pool is not None and node.pool != job.pool:
            out.append(f"job {job.id} asked for pool {job.pool}, started in {node.pool}")
        allowed = team_pools.get(job.team)
        if allowed is not None and node.pool not in allowed:
            out.append(f"team {job.team} may not use pool {node.pool} (job {job.id})")
        if job.image_pools is not None and node.pool not in job.image_pools:
            out.append(f"pool {node.pool} does not allow image {job.image} (job {job.id})")
        for k, v in job.node_labels.items():
            if node.labels.get(k) != v:
                out.append(f"job {job.id} needs label {k}={v}; node {node.name} lacks it")
        if job.min_driver_version and version_tuple(node.driver_version) < version_tuple(job.min_driver_version):
            out.append(f"job {job.id} needs driver >= {job.min_driver_version}; {node.name} has {node.driver_version}")
        if (job.team, gpu.model, node.pool) not in rows and (job.team, gpu.model, None) not in rows:
            out.append(f"team {job.team} has no quota for {gpu.model} but job {job.id} started on it")
        expected = fraction if fraction is not None else 1.0
        if abs(p.share - expected) > 1e-9:
            out.append(f"job {job.id} holds share {p.share} of device {p.gpu_id}, expected {expected}")
    if len({p.gpu_id for p in placements}) != len(placements):
        out.append(f"job {job.id} placed twice on one device")
    want = 1 if fraction is not None else job.gpus
    if len(placements) != want:
        out.append(f"partial gang: job {job.id} wants {want} devices, got {len(placements)}")
    if job.nodes is not None and fraction is None:
        if len(nodes_used) != job.nodes:
            out.append(f"job {job.id} wants exactly {job.nodes} nodes, got {len(nodes_used)}")
        elif job.gpus % job.nodes == 0 and any(c != job.gpus // job.nodes for c in nodes_used.values()):
            out.append(f"job {job.id} wants {job.gpus // job.nodes} GPUs on each node, got {dict(nodes_used)}")
    return out


def _check_non_preemptible(decisions, jobs, devices, rows, held_np) -> list[str]:
    """Non-preemptible work of a team may not exceed its guaranteed quota of a model (``held_np``: what
    non-preemptible jobs held before the cycle, per team, model and pool)."""
    new: set[tuple] = set()
    held: dict[tuple, float] | None = None
    for s in decisions.starts:
        job = jobs.get(s.job_id)
        if job is None or job.preemptible:
            continue
        if held is None:
            held = defaultdict(float, held_np)
        for p in s.placements:
            if p.gpu_id in devices:
                node, gpu = devices[p.gpu_id]
                key = (job.team, gpu.model, node.pool)
                held[key] += p.share
                new.add(key)
    out: list[str] = []
    if held is None:
        return out
    for team, model, pool in sorted(new):
        row = rows.get((team, model, pool)) or rows.get((team, model, None))
        g = row.guaranteed if row else 0.0
        if row is not None and row.pool is None:
            total = sum(v for (t, m, _p), v in held.items() if t == team and m == model)
        else:
            total = held[(team, model, pool)]
        if total > g + EPS:
            out.append(f"team {team} runs {total:g} non-preemptible {model} over its guarantee {g:g}")
    return out


def _check_pending(decisions, waiting, held_jobs, started) -> list[str]:
    """Every waiting job (``waiting``: the snapshot's pending and held jobs) not started has exactly one
    pending entry with a known reason code (``held_jobs``: Held)."""
    out = []
    pending = decisions.pending
    seen = Counter(map(_job_id_of, pending))  # C-level passes: this runs on every simulated cycle
    if not _CODES.issuperset(map(_code_of, pending)) or not started.isdisjoint(seen):
        for info in pending:
            code = info.reason.code
            if not code:
                out.append(f"job {info.job_id} waits without a reason code")
            elif code not in _CODES:
                out.append(f"job {info.job_id} waits with unknown reason code {code}")
            if info.job_id in started:
                out.append(f"job {info.job_id} is both started and pending")
    first_code: dict[int, str] | None = None
    expected = {job.id for job in waiting}.difference(started)
    once = len(seen) == len(pending)  # no job has two entries
    if not (once and expected.issubset(seen)):
        for job in waiting:
            if job.id in expected and seen.get(job.id, 0) != 1:
                out.append(f"job {job.id} ({job.state}) has {seen.get(job.id, 0)} pending entries, expected 1")
    for job in held_jobs:
        if job.id in started:
            out.append(f"held job {job.id} was started")
            continue
        if first_code is None:
            first_code = {}
            for info in pending:
                first_code.setdefault(info.job_id, info.reason.code)
        code = first_code.get(job.id)
        if code is not None and code != R.HELD:
            out.append(f"held job {job.id} has reason {code}, expected Held")
    return out


def _check_preemptions(snapshot: Snapshot, decisions: Decisions, jobs, started) -> list[str]:
    out: list[str] = []
    if not decisions.preemptions:
        return out
    classes = {c.name: c for c in snapshot.priority_classes}
    pending_codes = {i.job_id: i.reason.code for i in decisions.pending}
    victims: set[int] = set()
    for pre in decisions.preemptions:
        victim, by = jobs.get(pre.job_id), jobs.get(pre.by_job_id)
        if victim is None or by is None:
            out.append(f"preemption names unknown job(s) {pre.job_id} / {pre.by_job_id}")
            continue
        if pre.job_id in victims:
            out.append(f"job {victim.id} preempted twice")
        victims.add(victim.id)
        if victim.state != RUNNING or not victim.placements:
            out.append(f"preempted job {victim.id} is not running")
        if victim.terminating:
            out.append(f"preempted job {victim.id} is already terminating")
        if not victim.preemptible:
            out.append(f"non-preemptible job {victim.id} was preempted")
        if pre.reason != "Reclaim" and victim.priority >= by.priority:
            out.append(f"job {by.id} (priority {by.priority}) preempted job {victim.id} of equal or higher "
                       f"priority {victim.priority} without reclaim")
        if pre.reason != "Reclaim" and victim.team != by.team and snapshot.policy.preemption_scope != "cluster":
            out.append(f"job {by.id} of team {by.team} preempted job {victim.id} of team {victim.team} "
                       "without reclaim")
        cls = classes.get(victim.priority_class)
        if (cls is not None and victim.started_at is not None and cls.min_runtime_s > 0
                and snapshot.now - victim.started_at < cls.min_runtime_s - EPS):
            out.append(f"job {victim.id} preempted before its minimum runtime {cls.min_runtime_s:g}s")
        if by.id in started:
            out.append(f"job {by.id} started in the same cycle as its preemption of {victim.id}")
        elif pending_codes.get(by.id) != R.PREEMPTING:
            out.append(f"job {by.id} preempts but waits with {pending_codes.get(by.id)}, expected Preempting")
    return out
