"""Reclaim converges (issue 21, part 2): property tests over random teams, guarantees and job streams.

Each example is one GPU model in one pool, teams whose guarantees add up to the pool (or not), and a stream
of preemptible jobs of one priority, so every preemption is a reclaim. Cycles run the way the live system
does (starts run; victims stop after one cycle and are requeued; no job finishes, so only the scheduler can
end the preemptions). Every cycle:

* reclaim serves a concrete guaranteed need: the GPUs the preemptors of a team ask for fit inside what
  the team's running jobs leave of its guarantee, and each preemptor's victims are all needed (without
  its smallest victim the rest would not cover the request);
* no job is preempted before its minimum runtime, nor (hysteresis) in the cycle after it started;

and once arrivals stop, the run reaches a cycle without preemptions.
"""

import os
import random
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.core import check_invariants, schedule
from scheduler.core.policies import PRESETS
from scheduler.core.types import PENDING, RUNNING, GpuDevice, JobInfo, NodeInfo, PriorityClassInfo, QuotaInfo, Snapshot

MODEL = "h100-80gb"
INTERVAL = 10.0  # seconds between cycles
ARRIVAL_CYCLES, QUIET_CYCLES = 6, 14
_SEARCH = int(os.environ.get("ROTA_HYPOTHESIS_SEARCH", "0"))
SETTINGS = settings(max_examples=_SEARCH or 60, deadline=None, derandomize=not _SEARCH,
                    suppress_health_check=[HealthCheck.too_slow])


@st.composite
def worlds(draw):
    sizes = draw(st.lists(st.sampled_from((4, 8)), min_size=1, max_size=3))
    nodes, gid = [], 0
    for i, size in enumerate(sizes):
        nodes.append(NodeInfo(f"n{i}", "p1", tuple(GpuDevice(gid + k, f"n{i}", k, MODEL, 81920) for k in range(size))))
        gid += size
    total = sum(sizes)
    teams = [f"t{i}" for i in range(draw(st.integers(2, 5)))]
    if draw(st.booleans()):  # guarantees add up to the whole pool
        cuts = sorted(draw(st.lists(st.integers(0, total), min_size=len(teams) - 1, max_size=len(teams) - 1)))
        guarantees = [b - a for a, b in zip([0, *cuts], [*cuts, total], strict=True)]
    else:
        guarantees = [draw(st.integers(0, total // 2)) for _ in teams]
    quotas = tuple(QuotaInfo(t, MODEL, guaranteed=g) for t, g in zip(teams, guarantees, strict=True))
    min_runtime = draw(st.sampled_from((0.0, 15.0, 40.0)))
    cls = PriorityClassInfo("batch", 100, min_runtime_s=min_runtime, grace_period_s=5)
    return tuple(nodes), quotas, cls, draw(st.integers(0, 2**32))


def random_arrivals(cycle, teams, rng):
    """The default job stream: up to six jobs a cycle of random teams and sizes, for the first cycles."""
    if cycle >= ARRIVAL_CYCLES:
        return []
    return [(rng.choice(teams), rng.choice((1, 1, 2, 4))) for _ in range(rng.randint(0, 6))]


def run(world, arrivals=random_arrivals):
    """Run the cycles; return the number of preemptions."""
    nodes, quotas, cls, seed = world
    rng = random.Random(seed)
    guarantee = {q.team: q.guaranteed for q in quotas}
    teams = sorted(guarantee)
    jobs: dict[int, JobInfo] = {}
    started_at: dict[int, float] = {}
    preempted_at: dict[int, list[float]] = {}
    now, next_id, quiet_preemptions = 0.0, 1, []
    for cycle in range(ARRIVAL_CYCLES + QUIET_CYCLES):
        for team, gpus in arrivals(cycle, teams, rng):
            jobs[next_id] = JobInfo(id=next_id, team=team, priority_class=cls.name, priority=cls.value, gpus=gpus,
                                    submitted_at=now)
            next_id += 1
        snapshot = Snapshot(now=now, nodes=nodes, jobs=tuple(jobs[k] for k in sorted(jobs)), quotas=quotas,
                            priority_classes=(cls,), policy=PRESETS["rota"], cycle_interval_s=INTERVAL)
        decisions = schedule(snapshot)
        assert check_invariants(snapshot, decisions) == []
        assert_reclaim_serves_a_guaranteed_need(snapshot, decisions, guarantee)
        for pre in decisions.preemptions:
            victim = jobs[pre.job_id]
            ran = now - victim.started_at
            assert ran >= cls.min_runtime_s, f"job {victim.id} preempted after {ran:g} s < its minimum runtime"
            assert ran >= 2 * INTERVAL - 1e-9, f"job {victim.id} preempted in the cycle after it started"
            preempted_at.setdefault(victim.id, []).append(now)
        if cycle >= ARRIVAL_CYCLES:
            quiet_preemptions.append(len(decisions.preemptions))
        # Apply: victims of the last cycle are gone and requeue; starts run; new victims stop.
        for job in list(jobs.values()):
            if job.terminating:
                jobs[job.id] = replace(job, state=PENDING, placements=(), started_at=None, terminating=False)
        for start in decisions.starts:
            jobs[start.job_id] = replace(jobs[start.job_id], state=RUNNING, placements=start.placements,
                                         started_at=now)
            started_at[start.job_id] = now
        for pre in decisions.preemptions:
            jobs[pre.job_id] = replace(jobs[pre.job_id], terminating=True)
        now += INTERVAL
    assert 0 in quiet_preemptions, f"still preempting with no new arrivals: {quiet_preemptions}"
    return sum(len(v) for v in preempted_at.values())


def assert_reclaim_serves_a_guaranteed_need(snapshot, decisions, guarantee):
    jobs = {j.id: j for j in snapshot.jobs}
    held: dict[str, float] = {}
    for job in snapshot.jobs:
        if job.placements and not job.terminating:
            held[job.team] = held.get(job.team, 0.0) + sum(p.share for p in job.placements)
    victims: dict[int, list[JobInfo]] = {}
    for pre in decisions.preemptions:
        assert pre.reason == "Reclaim"
        victims.setdefault(pre.by_job_id, []).append(jobs[pre.job_id])
    asked: dict[str, float] = {}
    for by, lost in victims.items():
        preemptor = jobs[by]
        asked[preemptor.team] = asked.get(preemptor.team, 0.0) + preemptor.gpus
        sizes = sorted(len(v.placements) for v in lost)
        assert sum(sizes) - sizes[0] < preemptor.gpus, (
            f"job {by} ({preemptor.gpus} GPUs) preempted {sizes}: one victim fewer would have done")
        for victim in lost:
            assert victim.team != preemptor.team
    for team, gpus in asked.items():
        assert held.get(team, 0.0) + gpus <= guarantee[team] + 1e-9, (
            f"team {team} reclaims {gpus:g} GPUs holding {held.get(team, 0.0):g} of its {guarantee[team]:g}")


@SETTINGS
@given(worlds())
def test_reclaim_serves_guaranteed_needs_and_converges(world):
    run(world)


def test_a_pool_fully_guaranteed_reaches_a_quiet_cycle():
    """The bench's shape, small: guarantees add up to the pool; one team borrows all of it first, then the
    others queue more than their share, some of it behind a head that would borrow."""
    nodes = tuple(NodeInfo(f"n{i}", "p1", tuple(GpuDevice(8 * i + k, f"n{i}", k, MODEL, 81920) for k in range(8)))
                  for i in range(3))
    quotas = tuple(QuotaInfo(f"t{i}", MODEL, guaranteed=g) for i, g in enumerate((8, 8, 4, 4)))
    cls = PriorityClassInfo("batch", 100, min_runtime_s=0.0, grace_period_s=5)

    def arrivals(cycle, teams, rng):
        if cycle == 0:
            return [("t0", 4)] * 8
        if cycle == 1:
            return [("t1", 1)] * 6 + [("t2", 8), ("t2", 1), ("t2", 2)] + [("t3", 2)] * 3
        return []

    assert run((nodes, quotas, cls, 7), arrivals) >= 3  # reclaim did happen (t1, t3, t2), and stopped
