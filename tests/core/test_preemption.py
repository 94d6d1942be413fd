"""Preemption: within a team by priority, reclaim of borrowed capacity, victim choice, minimum runtime,
grace periods, and the two-step hand-over (victims stop, the preemptor starts in a later cycle)."""

from dataclasses import replace

import pytest

from scheduler.core import check_invariants, schedule
from scheduler.core import reasons as R
from scheduler.core.policies import PRESETS
from scheduler.core.types import JobInfo
from tests.core.builders import by_id, gpu_ids, node, quota, running, snap

N1 = node("n1", first_id=0)


def test_it_preempts_lower_priority_work_of_the_same_team():
    jobs = [running(1, "vision", gpu_ids(N1, 8), priority=100, priority_class="best-effort"),
            JobInfo(2, "vision", gpus=4, priority=800, priority_class="interactive")]
    s = snap([N1], jobs, [quota("vision", limit=8)])
    d = schedule(s)
    assert d.starts == ()
    assert [(p.job_id, p.by_job_id, p.reason) for p in d.preemptions] == [(1, 2, "Priority")]
    assert d.preemptions[0].grace_period_s == 10
    assert d.pending[0].reason.code == R.PREEMPTING
    assert check_invariants(s, d) == []


def test_it_never_preempts_a_higher_or_equal_priority_job():
    jobs = [running(1, "vision", gpu_ids(N1, 8), priority=800), JobInfo(2, "vision", gpus=4, priority=800)]
    d = schedule(snap([N1], jobs, [quota("vision")]))
    assert d.preemptions == ()
    assert d.pending[0].reason.code == R.RESOURCES


def test_it_never_preempts_another_teams_work_within_its_guarantee():
    jobs = [running(1, "nlp", gpu_ids(N1, 8), priority=100), JobInfo(2, "vision", gpus=4, priority=900)]
    d = schedule(snap([N1], jobs, [quota("vision", guaranteed=0), quota("nlp", guaranteed=8)]))
    assert d.preemptions == ()


def test_it_reclaims_borrowed_gpus_for_a_team_under_its_guarantee():
    jobs = [running(1, "nlp", gpu_ids(N1, 4), priority=900, started_at=10),
            running(2, "nlp", gpu_ids(N1, 4, start=4), priority=900, started_at=20),
            JobInfo(3, "vision", gpus=4, priority=100)]
    s = snap([N1], jobs, [quota("vision", guaranteed=4, limit=8), quota("nlp", guaranteed=4, limit=8)])
    d = schedule(s)
    # nlp borrows 4 above its guarantee: the most recently started job goes, even at a higher priority.
    assert [(p.job_id, p.reason) for p in d.preemptions] == [(2, "Reclaim")]
    assert "reclaim" in d.preemptions[0].message
    assert check_invariants(s, d) == []


def test_it_never_reclaims_below_the_lenders_guarantee():
    jobs = [running(1, "nlp", gpu_ids(N1, 6), started_at=10), JobInfo(2, "vision", gpus=4)]
    d = schedule(snap([N1], jobs, [quota("vision", guaranteed=4), quota("nlp", guaranteed=4)]))
    # nlp borrows only 2: taking its 6-GPU job would push it below its guarantee... but that's the only job,
    # and reclaim may take a whole job while the lender still borrows.
    assert [p.job_id for p in d.preemptions] == [1]


def test_it_chooses_the_smallest_victim_set():
    jobs = [running(1, "vision", gpu_ids(N1, 1), priority=100, started_at=50),
            running(2, "vision", gpu_ids(N1, 1, start=1), priority=100, started_at=60),
            running(3, "vision", gpu_ids(N1, 6, start=2), priority=100, started_at=10),
            JobInfo(4, "vision", gpus=6, priority=500)]
    d = schedule(snap([N1], jobs, [quota("vision")]))
    assert [p.job_id for p in d.preemptions] == [3]


def test_it_prefers_the_most_recently_started_and_lowest_priority_victims():
    jobs = [running(1, "vision", gpu_ids(N1, 4), priority=300, started_at=10, priority_class="batch"),
            running(2, "vision", gpu_ids(N1, 4, start=4), priority=300, started_at=500, priority_class="batch"),
            JobInfo(3, "vision", gpus=4, priority=500)]
    d = schedule(snap([N1], jobs, [quota("vision")]))
    assert [p.job_id for p in d.preemptions] == [2]
    jobs[0] = replace(jobs[0], priority=100)
    d = schedule(snap([N1], jobs, [quota("vision")]))
    assert [p.job_id for p in d.preemptions] == [1]


def test_it_respects_the_victims_minimum_runtime():
    # "training" jobs must run 600 s before they may be preempted; now is 1000.
    young = running(1, "vision", gpu_ids(N1, 8), priority=500, priority_class="training", started_at=900)
    d = schedule(snap([N1], [young, JobInfo(2, "vision", gpus=4, priority=800)], [quota("vision")]))
    assert d.preemptions == ()
    old = replace(young, started_at=100)
    d = schedule(snap([N1], [old, JobInfo(2, "vision", gpus=4, priority=800)], [quota("vision")]))
    assert [p.job_id for p in d.preemptions] == [1]
    assert d.preemptions[0].grace_period_s == 120
    assert d.preemptions[0].gpu_seconds_lost == 900 * 8


def test_it_counts_lost_work_from_the_last_checkpoint():
    victim = running(1, "vision", gpu_ids(N1, 2), priority=100, started_at=0, last_checkpoint_at=700)
    d = schedule(snap([N1], [victim, running(3, "nlp", gpu_ids(N1, 6, start=2)),
                             JobInfo(2, "vision", gpus=2, priority=500)], [quota("vision"), quota("nlp")]))
    assert d.preemptions[0].gpu_seconds_lost == 300 * 2


def test_it_preempts_the_job_that_loses_the_least_work_since_its_checkpoint_not_the_youngest():
    saved = running(1, "vision", gpu_ids(N1, 4), priority=100, started_at=0, last_checkpoint_at=960)
    young = running(4, "vision", gpu_ids(N1, 4, start=4), priority=100, started_at=100)  # past its min runtime
    s = snap([N1], [saved, young, JobInfo(2, "vision", gpus=4, priority=500)], [quota("vision", limit=8)])
    d = schedule(s)
    assert [p.job_id for p in d.preemptions] == [1]  # 40 s lost since its checkpoint, against 900 s
    assert d.preemptions[0].gpu_seconds_lost == (s.now - 960) * 4
    without = schedule(snap([N1], [replace(saved, last_checkpoint_at=None), young,
                                   JobInfo(2, "vision", gpus=4, priority=500)], [quota("vision", limit=8)]))
    assert [p.job_id for p in without.preemptions] == [4]  # no checkpoint: the most recent start loses least


def test_it_never_preempts_when_the_job_still_would_not_fit():
    jobs = [running(1, "vision", gpu_ids(N1, 2), priority=100), running(2, "nlp", gpu_ids(N1, 6, start=2)),
            JobInfo(3, "vision", gpus=4, priority=500)]
    d = schedule(snap([N1], jobs, [quota("vision", guaranteed=2), quota("nlp", guaranteed=6)]))
    assert d.preemptions == ()
    assert d.pending[0].reason.code == R.RESOURCES


def test_it_never_preempts_non_preemptible_or_terminating_jobs():
    jobs = [running(1, "vision", gpu_ids(N1, 4), priority=100, preemptible=False),
            running(2, "vision", gpu_ids(N1, 4, start=4), priority=100, terminating=True),
            JobInfo(3, "vision", gpus=8, priority=500)]
    d = schedule(snap([N1], jobs, [quota("vision", guaranteed=8)]))
    assert d.preemptions == ()


def test_it_hands_victims_devices_to_the_preemptor_in_a_later_cycle():
    victim = running(1, "vision", gpu_ids(N1, 8), priority=100)
    boss = JobInfo(2, "vision", gpus=8, priority=800)
    qs = [quota("vision")]
    first = schedule(snap([N1], [victim, boss], qs))
    assert [p.job_id for p in first.preemptions] == [1]
    # Next cycle: the victim is stopping and still holds its devices; no new preemption, no start.
    second_snap = snap([N1], [replace(victim, terminating=True), boss], qs)
    second = schedule(second_snap)
    assert second.preemptions == () and second.starts == ()
    assert second.pending[0].reason.code == R.PREEMPTING
    assert check_invariants(second_snap, second) == []
    # The node confirmed the processes are gone: the preemptor starts.
    third = schedule(snap([N1], [boss], qs))
    assert [s.job_id for s in third.starts] == [2]


def test_it_keeps_the_preemptors_devices_from_later_jobs_in_the_same_cycle():
    jobs = [running(1, "vision", gpu_ids(N1, 4), priority=100),
            JobInfo(2, "vision", gpus=8, priority=800), JobInfo(3, "vision", gpus=2, priority=50)]
    s = snap([N1], jobs, [quota("vision")])
    d = schedule(s)
    started, pending = by_id(d)
    assert started == set()
    assert pending[2].reason.code == R.PREEMPTING
    assert check_invariants(s, d) == []


def test_it_does_not_preempt_under_a_policy_without_preemption():
    jobs = [running(1, "vision", gpu_ids(N1, 8), priority=100), JobInfo(2, "vision", gpus=4, priority=800)]
    d = schedule(snap([N1], jobs, [quota("vision")], policy="slurm"))
    assert d.preemptions == ()


def test_it_never_reclaims_a_team_below_its_guarantee_counting_jobs_already_stopping():
    """Team b holds 6 GPUs against a guarantee of 2, but 4 of them are already being preempted (reclaimed
    last cycle). c, under its guarantee, needs a GPU in pool p2 where b runs its last 2: taking one would
    leave b with 1 < 2 once the stopping jobs are gone, so c must wait instead (no reclaim ping-pong)."""
    n1, n2 = node("n1", gpus=4, pool="p1", first_id=0), node("n2", gpus=4, pool="p2", first_id=100)
    stopping = [replace(running(10 + i, "b", (i,)), terminating=True) for i in range(4)]
    jobs = stopping + [running(20, "b", (100,)), running(21, "b", (101,)), running(30, "d", (102, 103)),
                       JobInfo(40, "c", gpus=1, pool="p2", submitted_at=5)]
    s = snap([n1, n2], jobs, [quota(t, guaranteed=2, limit=8) for t in ("b", "c", "d")])
    d = schedule(s)
    assert d.preemptions == ()
    assert not d.starts
    assert check_invariants(s, d) == []


def test_a_job_larger_than_a_node_claims_released_devices_for_its_smaller_part():
    """12 GPUs on 8-GPU nodes: 8 on the idle n0, 4 on n1 where 2 are free and 2 are being released. n1 could
    never take the 8-GPU part, but its 4 claimable devices take the 4-GPU part."""
    n0, n1 = node("n0", first_id=0), node("n1", first_id=100)
    jobs = [running(1, "nlp", gpu_ids(n1, 4), preemptible=False),
            replace(running(2, "nlp", gpu_ids(n1, 2, start=4)), terminating=True),
            JobInfo(3, "vision", gpus=12, priority=500)]
    s = snap([n0, n1], jobs, [quota("vision", guaranteed=16, limit=16), quota("nlp", limit=16)])
    d = schedule(s)
    assert d.starts == () and d.preemptions == ()
    assert d.pending[0].reason.code == R.PREEMPTING
    assert d.pending[0].reason.details["nodes"] == ["n1", "n0"]
    assert check_invariants(s, d) == []


def test_released_devices_left_on_a_node_serve_the_next_job_and_claimed_ones_no_other():
    """n1 releases 4 devices (the rest is busy): two 2-GPU jobs each claim two of them, a third finds none."""
    jobs = [running(1, "nlp", gpu_ids(N1, 4), preemptible=False),
            replace(running(2, "nlp", gpu_ids(N1, 4, start=4)), terminating=True)]
    jobs += [JobInfo(10 + i, "vision", gpus=2, priority=500, submitted_at=float(i)) for i in range(3)]
    s = snap([N1], jobs, [quota("vision", guaranteed=8, limit=8), quota("nlp", limit=8)])
    d = schedule(s)
    _started, pending = by_id(d)
    assert [pending[j].reason.code for j in (10, 11, 12)] == [R.PREEMPTING, R.PREEMPTING, R.RESOURCES]
    assert check_invariants(s, d) == []


def test_nodes_that_can_no_longer_give_a_part_are_passed_over_and_the_rest_stay_claimable():
    """n1 releases 1 device, n2 and n3 release 2 each (everything else busy): a 2-GPU job passes n1 and claims
    n2; the next passes n1 and the spent n2 and claims n3."""
    n1, n2, n3 = (node(name, first_id=100 * k) for k, name in enumerate(("n1", "n2", "n3"), start=1))
    jobs = [running(1, "nlp", gpu_ids(n1, 7), preemptible=False),
            replace(running(2, "nlp", gpu_ids(n1, 1, start=7)), terminating=True)]
    for k, n in enumerate((n2, n3)):
        jobs += [running(10 + k, "nlp", gpu_ids(n, 6), preemptible=False),
                 replace(running(20 + k, "nlp", gpu_ids(n, 2, start=6)), terminating=True)]
    jobs += [JobInfo(30, "vision", gpus=2, submitted_at=1.0), JobInfo(31, "vision", gpus=2, submitted_at=2.0)]
    s = snap([n1, n2, n3], jobs, [quota("vision", guaranteed=8, limit=8), quota("nlp", limit=24)])
    d = schedule(s)
    _started, pending = by_id(d)
    assert [pending[j].reason.details.get("nodes") for j in (30, 31)] == [["n2"], ["n3"]]
    assert check_invariants(s, d) == []


def test_a_gang_claims_a_node_for_one_part_only_and_puts_the_other_on_a_free_node():
    """2 x 8 GPUs: n1 releases all 8 (one part), n2 is idle (the other part); n1 never takes both parts."""
    n1, n2 = node("n1", first_id=100), node("n2", first_id=200)
    jobs = [replace(running(1, "nlp", gpu_ids(n1, 8)), terminating=True), JobInfo(2, "vision", gpus=16, nodes=2)]
    s = snap([n1, n2], jobs, [quota("vision", guaranteed=16, limit=16), quota("nlp", limit=16)])
    d = schedule(s)
    assert d.starts == () and d.pending[0].reason.code == R.PREEMPTING
    assert d.pending[0].reason.details["nodes"] == ["n1", "n2"]
    assert check_invariants(s, d) == []


def test_a_node_without_host_room_for_one_job_stays_claimable_for_the_next():
    """n1's free CPUs (none: the stopping job still holds them) keep a job asking for CPUs off it; a job of
    the same size asking for none claims it next."""
    n1 = node("n1", first_id=100, cpus=32)
    jobs = [running(1, "nlp", gpu_ids(n1, 6), preemptible=False),
            replace(running(2, "nlp", gpu_ids(n1, 2, start=6), cpus=32), terminating=True),
            JobInfo(3, "vision", gpus=2, cpus=8, submitted_at=1.0), JobInfo(4, "vision", gpus=2, submitted_at=2.0)]
    s = snap([n1], jobs, [quota("vision", guaranteed=8, limit=8), quota("nlp", limit=8)])
    d = schedule(s)
    _started, pending = by_id(d)
    assert pending[3].reason.code != R.PREEMPTING  # no room on n1's host for its CPUs
    assert pending[4].reason.code == R.PREEMPTING and pending[4].reason.details["nodes"] == ["n1"]
    assert check_invariants(s, d) == []


# -- Tiresias-like discretized LAS: service levels rank jobs; preemption across teams by level ---------

def _las(**kw):
    return replace(PRESETS["tiresias"], **kw)


def test_las_levels_let_a_fresh_job_preempt_a_long_served_job_of_another_team():
    # Team nlp's job has had 10 GPU-hours on 8 GPUs (level 2 of the preset's 1 h / 10 h thresholds); a fresh
    # 4-GPU job of vision (level 0, same priority class) takes its place. Reclaim is off in this preset.
    jobs = [running(1, "nlp", gpu_ids(N1, 8), priority=500, attained_gpu_s=36_000.0),
            JobInfo(2, "vision", gpus=4, priority=500, submitted_at=900.0)]
    s = snap([N1], jobs, [quota("vision", limit=8), quota("nlp", limit=8)], policy=_las())
    d = schedule(s)
    assert [(p.job_id, p.by_job_id, p.reason) for p in d.preemptions] == [(1, 2, "Priority")]
    assert "received less GPU time" in d.preemptions[0].message
    assert d.pending[0].reason.code == R.PREEMPTING
    assert check_invariants(s, d) == []
    # The same cluster under team-scoped preemption (Rota's default) leaves nlp's job alone.
    d = schedule(replace(s, policy=_las(preemption_scope="team")))
    assert d.preemptions == ()


def test_las_levels_never_preempt_a_job_of_the_same_level():
    jobs = [running(1, "nlp", gpu_ids(N1, 8), priority=500, attained_gpu_s=3_000.0),  # level 0, like job 2
            JobInfo(2, "vision", gpus=4, priority=500, submitted_at=900.0)]
    d = schedule(snap([N1], jobs, [quota("vision"), quota("nlp")], policy=_las()))
    assert d.preemptions == ()
    assert d.pending[0].reason.code == R.RESOURCES


def test_las_levels_never_outrank_the_priority_class():
    # A fresh best-effort job does not preempt a long-served interactive one: priority comes before level.
    jobs = [running(1, "nlp", gpu_ids(N1, 8), priority=800, attained_gpu_s=1e6),
            JobInfo(2, "vision", gpus=4, priority=100, priority_class="best-effort")]
    d = schedule(snap([N1], jobs, [quota("vision"), quota("nlp")], policy=_las()))
    assert d.preemptions == ()


def test_other_teams_victims_give_no_quota_back_to_the_preemptor():
    # vision is at its limit (4 of 4); preempting nlp's job frees GPUs but not vision's quota: no plan.
    # nlp's job started last, so it is the preferred victim; taking it would leave vision above its limit.
    jobs = [running(1, "vision", gpu_ids(N1, 4), priority=500, attained_gpu_s=50_000.0, started_at=0.0),
            running(2, "nlp", gpu_ids(N1, 4, start=4), priority=500, attained_gpu_s=50_000.0, started_at=100.0),
            JobInfo(3, "vision", gpus=4, priority=500)]
    s = snap([N1], jobs, [quota("vision", limit=4), quota("nlp")], policy=_las())
    d = schedule(s)
    # The plan (smallest set, preferred victims first) takes nlp's job, gives vision no quota back, and is
    # dropped: the job waits on its own limit instead of preempting a team that does not block it.
    assert d.preemptions == ()
    assert d.pending[0].reason.code == R.QUOTA_EXCEEDED
    assert check_invariants(s, d) == []


def test_an_unknown_preemption_scope_is_refused():
    with pytest.raises(ValueError, match="preemption_scope"):
        schedule(snap([N1], [JobInfo(1, "a")], [quota("a")], policy=_las(preemption_scope="everyone")))


def test_reclaim_finds_the_nearly_free_node_beyond_the_preferred_candidates():
    # 16 full nodes each hold 4 recent 1-GPU jobs of the borrowing team and 4 of a team within its
    # guarantee: 64 preferred reclaim candidates, none of which can free a whole node. The 17th node has 7
    # free devices and one old job of the borrower: taking it is the one-victim plan that gives the owner
    # its guaranteed 8 (it used to wait on Resources, as the plan looked at the first 64 candidates only).
    nodes = [node(f"n{i:02d}", first_id=i * 8) for i in range(17)]
    jobs, jid = [], 1
    for i in range(16):
        for d in range(8):
            team = "lender" if d < 4 else "steady"
            jobs.append(running(jid, team, (i * 8 + d,), started_at=500.0 + jid))
            jid += 1
    jobs.append(running(jid, "lender", (16 * 8,), started_at=0.0))
    old = jid
    jobs.append(JobInfo(jid + 1, "owner", gpus=8))
    s = snap(nodes, jobs, [quota("owner", guaranteed=8), quota("lender"), quota("steady", guaranteed=64)],
             now=5000.0)  # every job is past its minimum runtime
    d = schedule(s)
    assert [(p.job_id, p.reason) for p in d.preemptions] == [(old, "Reclaim")]
    assert d.pending[0].reason.code == R.PREEMPTING
    assert check_invariants(s, d) == []


def test_reclaim_takes_one_big_old_job_rather_than_waiting_behind_spread_small_ones():
    # As above, but the 17th node is full with one old 8-GPU job of the borrower (no free device there).
    nodes = [node(f"n{i:02d}", first_id=i * 8) for i in range(17)]
    jobs, jid = [], 1
    for i in range(16):
        for d in range(8):
            jobs.append(running(jid, "lender" if d < 4 else "steady", (i * 8 + d,), started_at=1000.0 + jid))
            jid += 1
    jobs.append(running(jid, "lender", tuple(range(16 * 8, 17 * 8)), started_at=0.0))
    big = jid
    jobs.append(JobInfo(jid + 1, "owner", gpus=8))
    s = snap(nodes, jobs, [quota("owner", guaranteed=8), quota("lender"), quota("steady", guaranteed=64)],
             now=5000.0)
    d = schedule(s)
    assert [(p.job_id, p.reason) for p in d.preemptions] == [(big, "Reclaim")]
    assert check_invariants(s, d) == []


def test_cluster_scope_prefers_a_borrowers_job_as_its_victim():
    # Equal priorities; a borrows, b runs inside its guarantee and started later (otherwise preferred).
    n = node("n1", gpus=2, first_id=0)
    jobs = [running(1, "a", (0,), priority=100, priority_class="best-effort", started_at=10.0),
            running(2, "b", (1,), priority=100, priority_class="best-effort", started_at=500.0),
            JobInfo(3, "c", gpus=1, priority=500)]
    q = [quota("a"), quota("b", guaranteed=1), quota("c")]
    for policy in (_las(), replace(PRESETS["rota"], preemption_scope="cluster", reclaim=False)):
        d = schedule(snap([n], jobs, q, policy=policy))
        assert [(p.job_id, p.reason) for p in d.preemptions] == [(1, "Priority")], policy


def test_cluster_scope_with_reclaim_counts_a_victim_once():
    # The borrower's half share is both a priority and a reclaim candidate; counting it twice made the
    # device look free and preempted it for a job that still would not fit beside the other half.
    n = node("n1", gpus=1, first_id=0)
    jobs = [running(1, "lender", (0,), share=0.5, gpu_fraction=0.5, priority=100, priority_class="best-effort"),
            running(2, "steady", (0,), share=0.5, gpu_fraction=0.5, priority=1000,
                    priority_class="production-inference", preemptible=False),
            JobInfo(3, "owner", gpus=1, priority=500)]
    q = [quota("owner", guaranteed=1), quota("lender"), quota("steady", guaranteed=1)]
    s = snap([n], jobs, q, policy=replace(PRESETS["rota"], preemption_scope="cluster"))
    d = schedule(s)
    assert d.preemptions == ()
    assert d.pending[0].reason.code == R.RESOURCES


def test_an_owner_waits_for_reclaim_while_the_borrowers_jobs_are_in_their_minimum_runtime():
    # nlp borrows the whole node with a training job started 100 s ago (minimum runtime 600 s): vision,
    # inside its guarantee, is told when the GPUs can be taken back instead of a bare "no free GPUs".
    jobs = [running(1, "nlp", gpu_ids(N1, 8), started_at=900.0), JobInfo(2, "vision", gpus=4)]
    s = snap([N1], jobs, [quota("vision", guaranteed=4), quota("nlp", guaranteed=4)], now=1000.0)
    d = schedule(s)
    assert d.preemptions == ()
    info = d.pending[0]
    assert info.reason.code == R.WAITING_FOR_RECLAIM
    assert info.reason.details["reclaimable_at"] == 1500.0 and info.estimated_start == 1500.0
    assert "can be reclaimed in 8 min, when team nlp's job 1 has run its minimum time" in info.reason.message
    assert check_invariants(s, d) == []
    # Past the minimum runtime the reclaim happens.
    d = schedule(replace(s, now=1500.0))
    assert [(p.job_id, p.reason) for p in d.preemptions] == [(1, "Reclaim")]
    # A team beyond its guarantee has nothing to reclaim: it just waits for room.
    over = snap([N1], jobs, [quota("vision", guaranteed=2), quota("nlp", guaranteed=4)], now=1000.0)
    assert schedule(over).pending[0].reason.code == R.RESOURCES



def test_the_waiting_jobs_reason_names_its_own_teams_victims_and_only_counts_other_teams():
    # Its team reads the waiting job's reason: its own victims by id, other teams' only as a count.
    own = [running(1, "vision", gpu_ids(N1, 8), priority=100, priority_class="best-effort"),
           JobInfo(2, "vision", gpus=4, priority=800, priority_class="interactive")]
    reason = schedule(snap([N1], own, [quota("vision", limit=8)])).pending[0].reason
    assert reason.message.startswith("preempting 1 job(s) (your team's 1) to free 4 GPUs")
    assert reason.details["victims"] == [1] and reason.details["victims_of_other_teams"] == 0
    other = [running(1, "nlp", gpu_ids(N1, 4), priority=900, started_at=10),
             running(2, "nlp", gpu_ids(N1, 4, start=4), priority=900, started_at=20),
             JobInfo(3, "vision", gpus=4, priority=100)]
    d = schedule(snap([N1], other, [quota("vision", guaranteed=4, limit=8), quota("nlp", guaranteed=4, limit=8)]))
    assert [p.job_id for p in d.preemptions] == [2]
    reason = d.pending[0].reason
    assert reason.message.startswith("preempting 1 job(s) (1 of other teams) to free 4 GPUs")
    assert reason.details["victims"] == [] and reason.details["victims_of_other_teams"] == 1


def test_a_job_that_may_not_preempt_waits_for_free_gpus_whatever_its_class():
    n1 = node("n1", gpus=2, first_id=0)
    jobs = [running(1, "vision", gpu_ids(n1, 2), priority=300, priority_class="batch"),
            JobInfo(2, "vision", gpus=2, priority=1000, priority_class="production-inference", preemptible=False,
                    kind="inference", may_preempt=False),
            JobInfo(3, "vision", gpus=2, priority=1000, priority_class="production-inference", preemptible=False,
                    kind="inference", submitted_at=5)]
    d = schedule(snap([n1], jobs, [quota("vision", guaranteed=2, limit=4)]))
    assert [(p.job_id, p.by_job_id) for p in d.preemptions] == [(1, 3)]  # job 3 may; job 2 (crash-looping) not
