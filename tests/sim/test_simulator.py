"""The event loop, driven by a toy policy so that every number can be worked out by hand."""

import functools
import math

import pytest

from scheduler.core.policies import PRESETS
from scheduler.core.types import Decisions, Placement, QuotaInfo, Snapshot, Start, TeamInfo
from scheduler.sim.cluster import load_cluster
from scheduler.sim.ledger import TeamLedger
from scheduler.sim.metrics import summarize
from scheduler.sim.quotas import TeamSetup, derive_quotas
from scheduler.sim.simulator import SimConfig, simulate
from scheduler.sim.trace import Trace, TraceJob
from tests.sim.toy_policy import fifo_first_fit, no_violations

FIFO = PRESETS["fifo"]


def make_trace(*jobs: tuple, end: float | None = None) -> Trace:
    """Jobs as (submit, duration, gpus[, team[, time_limit]]); ids 1, 2, ... in the given order."""
    out = []
    for i, spec in enumerate(jobs, start=1):
        submit, duration, gpus, team, limit = (*spec, "t", None)[:5] if len(spec) == 3 else (*spec, None)[:5]
        out.append(
            TraceJob(id=i, submit_time=submit, duration=duration, gpus=gpus, team=team, time_limit_s=limit)
        )
    return Trace(jobs=tuple(out), end=end)


def replay(
    trace: Trace,
    spec: str = "1x2",
    interval: float = 0.0,
    policy=fifo_first_fit,
    setup=None,
    preset=FIFO,
    **config,
):
    cluster = load_cluster(spec)
    setup = setup or derive_quotas(trace, cluster)
    cfg = SimConfig(cycle_interval_s=interval, **config)
    return simulate(trace, cluster, setup, preset, cfg, schedule_fn=policy, check_fn=no_violations)


def jcts(result) -> dict[int, float]:
    return {job.id: job.jct for job in result.jobs}


def test_it_runs_three_jobs_on_one_node_in_arrival_order_with_hand_computed_jct():
    # A needs both GPUs for 100 s; B (50 s) and C (30 s) wait for it, then run side by side.
    result = replay(make_trace((0, 100, 2), (0, 50, 1), (0, 30, 1), end=200))
    assert jcts(result) == {1: 100, 2: 150, 3: 130}
    summary = summarize(result)
    assert summary["avg_jct_s"] == pytest.approx(380 / 3)
    assert summary["jct_lower_bound_s"] == pytest.approx(60)
    assert (summary["avg_queue_s"], summary["p50_queue_s"]) == (pytest.approx(200 / 3), 100)
    assert summary["makespan_s"] == 150
    assert summary["utilization"] == pytest.approx(280 / 400)
    assert summary["utilization_bound"] == pytest.approx(280 / 400)
    assert summary["invariant_violations"] == summary["quota_violations"] == summary["apply_errors"] == 0


def test_it_starts_waiting_jobs_on_the_next_cycle_tick():
    result = replay(make_trace((0, 100, 2), (0, 50, 1), (0, 30, 1)), interval=60)
    assert jcts(result) == {1: 100, 2: 170, 3: 150}  # A ends at 100; the next cycle is at 120


def test_it_skips_cycles_while_no_waiting_job_fits_and_the_policy_cannot_preempt():
    trace = make_trace((0, 1000, 1), (10, 1000, 1), (20, 1000, 1), (30, 1000, 1), (40, 1000, 1))
    result = replay(trace, spec="1x1", interval=10, heartbeat_s=600)
    assert result.cycles == 5  # one per start: arrivals into a full cluster cost nothing
    assert jcts(result)[5] == 5000 - 40


def test_it_keeps_a_victims_devices_for_its_grace_period_and_charges_a_restart_cost():
    # J1 runs; J2 (2 GPUs) is blocked; J3 is backfilled at t=10, then preempted for J2 when J1 ends
    # at t=100; it stops at 130 (30 s grace), J2 runs 130-180, J3 resumes at 180 owing 60 s + 410 s.
    toy = functools.partial(fifo_first_fit, preempt=True, backfill=True)
    trace = make_trace((0, 100, 1), (1, 50, 2), (2, 500, 1))
    result = replay(trace, interval=10, policy=toy, preset=PRESETS["rota"])
    assert jcts(result) == {1: 100, 2: 179, 3: 648}
    assert result.preemptions == 1
    assert result.lost_gpu_s == pytest.approx(90)  # 30 s grace + 60 s restart, on 1 GPU
    j3 = next(j for j in result.jobs if j.id == 3)
    assert (j3.preemptions, j3.lost_gpu_s, j3.first_start) == (1, pytest.approx(90), 10)


def test_it_rolls_back_to_the_last_checkpoint_when_checkpoints_are_periodic():
    toy = functools.partial(fifo_first_fit, preempt=True, backfill=True)
    trace = make_trace((0, 100, 1), (1, 50, 2), (2, 500, 1))
    result = replay(trace, interval=10, policy=toy, preset=PRESETS["rota"], checkpoint_interval_s=50)
    # J3 worked 90 s (10-100) but only 50 s were saved: it resumes at 180 owing 60 + 450 s.
    assert jcts(result)[3] == 180 + 60 + 450 - 2
    assert result.lost_gpu_s == pytest.approx(40 + 30 + 60)


def test_it_ends_a_job_at_its_time_limit():
    result = replay(make_trace((0, 100, 1, "t", 40)))
    job = result.jobs[0]
    assert (job.outcome, job.jct) == ("timed-out", 40)
    assert summarize(result)["timed_out"] == 1


def test_it_stops_when_the_only_waiting_jobs_can_never_start():
    result = replay(make_trace((0, 10, 1), (0, 10, 4)))
    assert summarize(result)["unfinished"] == 1
    assert next(j for j in result.jobs if j.id == 2).outcome == "pending"


def test_it_counts_invariant_violations_reported_by_the_checker():
    trace = make_trace((0, 10, 1), (5, 10, 1))
    cluster = load_cluster("1x2")
    result = simulate(
        trace,
        cluster,
        derive_quotas(trace, cluster),
        FIFO,
        SimConfig(cycle_interval_s=0),
        schedule_fn=fifo_first_fit,
        check_fn=lambda s, d: ["always wrong"],
    )
    assert result.invariant_violations == result.cycles == 2
    assert summarize(result)["problems"] == ["always wrong", "always wrong"]


def test_it_refuses_a_start_on_a_busy_device_and_counts_it():
    def double_booker(snapshot: Snapshot) -> Decisions:
        waiting = [j for j in snapshot.jobs if j.state == "pending"]
        return Decisions(starts=tuple(Start(j.id, (Placement(1),)) for j in waiting))

    result = replay(make_trace((0, 10, 1), (0, 10, 1)), policy=double_booker)
    assert result.apply_errors == 1
    assert "not free" in result.apply_examples[0]


def test_it_counts_a_start_that_takes_a_team_past_its_limit():
    trace = make_trace((0, 10, 2, "a"))
    setup = TeamSetup(teams=(TeamInfo("a"),), quotas=(QuotaInfo("a", "gpu", guaranteed=1, limit=1),))
    result = replay(trace, setup=setup)
    assert result.quota_violations == 1
    assert "team a holds 2 gpu GPUs, limit 1" in result.quota_examples[0]


def test_it_measures_starvation_below_the_guarantee_and_share_while_jobs_wait():
    # b (no guarantee) holds the only GPU until 100; a's job (guarantee 1) waits from its first cycle at 10.
    trace = make_trace((0, 100, 1, "b"), (5, 10, 1, "a"))
    setup = TeamSetup(
        teams=(TeamInfo("a"), TeamInfo("b")),
        quotas=(QuotaInfo("a", "gpu", guaranteed=1), QuotaInfo("b", "gpu")),
    )
    result = replay(trace, spec="1x1", interval=10, setup=setup)
    summary = summarize(result)
    assert summary["teams"]["a"]["starved_s"] == pytest.approx(90)
    assert summary["teams"]["b"]["starved_s"] == 0
    assert summary["teams"]["b"]["received_share"] == pytest.approx(1.0)


def test_the_ledger_decays_usage_with_the_fair_share_half_life():
    ledger = TeamLedger(["a"], {"a": 1.0}, half_life_s=100.0)
    ledger.change_held("a", 0.0, 1.0)
    rate = math.log(2) / 100
    assert ledger.usage_at(100.0)["a"] == pytest.approx(0.5 / rate)
    ledger.change_held("a", 100.0, -1.0)
    assert ledger.usage_at(200.0)["a"] == pytest.approx(0.25 / rate)


def test_the_ledger_keeps_the_longest_unbroken_starvation_stretch():
    ledger = TeamLedger(["a"], {"a": 2.0}, half_life_s=100.0)
    ledger.change_pending("a", 10.0, 1.0, +1)  # waits for 1 of its 2 guaranteed: starving from 10
    ledger.change_held("a", 40.0, 1.0)  # still has room for another 1-GPU job: keeps starving
    ledger.change_pending("a", 50.0, 1.0, -1)  # the job starts: stretch 10..50
    ledger.change_pending("a", 100.0, 1.0, +1)  # a new one at 100, still waiting when the replay ends
    ledger.advance_all(120.0)
    assert ledger.starved_s["a"] == pytest.approx(40 + 20)
    assert ledger.longest_starved("a", 120.0) == pytest.approx(40)
    assert ledger.longest_starved("a", 200.0) == pytest.approx(100)  # the open stretch counts to the end
