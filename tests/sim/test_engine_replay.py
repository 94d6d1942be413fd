"""Replays through the real engine (``scheduler.core.schedule``): hand-computed FIFO, and cycle skipping
that never changes an outcome."""

import random

import pytest

from scheduler.core.policies import PRESETS
from scheduler.sim.cluster import load_cluster
from scheduler.sim.metrics import summarize
from scheduler.sim.quotas import derive_quotas
from scheduler.sim.simulator import SimConfig, simulate
from scheduler.sim.trace import Trace, TraceJob


def test_fifo_runs_three_jobs_on_one_node_with_the_hand_computed_jct():
    jobs = (
        TraceJob(1, 0.0, 100.0, 2, team="x"),
        TraceJob(2, 0.0, 50.0, 1, team="y"),
        TraceJob(3, 0.0, 30.0, 1),
    )
    trace = Trace(jobs=jobs, end=200.0)
    cluster = load_cluster("1x2:v100")
    result = simulate(
        trace, cluster, derive_quotas(trace, cluster), PRESETS["fifo"], SimConfig(cycle_interval_s=0)
    )
    assert {j.id: j.jct for j in result.jobs} == {1: 100, 2: 150, 3: 130}
    summary = summarize(result)
    assert summary["avg_jct_s"] == pytest.approx(380 / 3)
    assert summary["utilization"] == pytest.approx(0.7)
    assert summary["invariant_violations"] == 0 and summary["apply_errors"] == 0


def synthetic_trace(count: int, seed: int = 7) -> Trace:
    """Poisson arrivals of mixed jobs from three teams of unequal appetite."""
    rng = random.Random(seed)
    jobs, now = [], 0.0
    for i in range(1, count + 1):
        now += rng.expovariate(1 / 120)
        jobs.append(
            TraceJob(
                id=i,
                submit_time=now,
                duration=rng.choice([300, 1200, 3600, 14400]),
                gpus=rng.choice([1, 1, 1, 2, 4, 8]),
                team=rng.choice("aaabc"),
            )
        )
    return Trace(jobs=tuple(jobs))


@pytest.mark.parametrize("policy", ["rota", "tiresias"])
def test_skipping_idle_cycles_changes_no_outcome_of_a_preempting_policy(policy):
    trace = synthetic_trace(150)
    # Four nodes: on two, Rota's reclaim (which serves only guaranteed work walked ahead of borrowing) finds
    # nothing to take back in this trace, and the test needs preemptions.
    cluster = load_cluster("4x8")
    setup = derive_quotas(trace, cluster)
    skipped = simulate(trace, cluster, setup, PRESETS[policy], SimConfig(skip_idle_cycles=True))
    every = simulate(trace, cluster, setup, PRESETS[policy], SimConfig(skip_idle_cycles=False))
    assert skipped.jobs == every.jobs
    assert skipped.preemptions == every.preemptions > 0
    assert skipped.cycles < every.cycles or policy == "tiresias"  # service levels: every cycle may preempt
    assert skipped.invariant_violations == every.invariant_violations == 0


def test_an_openb_packing_trace_shares_gpus_and_reports_unallocated_gpus(tmp_path, capsys):
    from scheduler.sim.cli import main

    (tmp_path / "openb_node_list_gpu_node.csv").write_text(
        "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,T4\nn1,64000,262144,1,P100\n"
    )
    pods = tmp_path / "openb_pod_list_gpushare100.csv"
    pods.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
        "p0,4000,1024,1,500\np1,4000,1024,1,500\np2,4000,1024,1,300\np3,4000,1024,2,1000\np4,4000,1024,1,700\n"
    )
    code = main(["--trace", str(pods), "--format", "openb", "--policy", "fifo", "--json", "--until", "100"])
    out = capsys.readouterr().out
    import json

    result = json.loads(out)["results"][0]
    assert code == 0
    assert result["invariant_violations"] == 0 and result["apply_errors"] == 0
    packing = result["packing"]
    assert packing["peak_allocated_gpus"] <= 3
    assert packing["unallocated_gpus_at_peak"] == pytest.approx(3 - packing["peak_allocated_gpus"])


def test_tiresias_preempts_a_long_served_job_for_a_fresh_one_of_another_team():
    # x's 8-GPU job has had 16 GPU-hours when y's 1-hour job arrives (service level 2 vs 0): under the
    # Tiresias preset y's job preempts it (after the training class's 300 s minimum runtime, long past);
    # Slurm-like backfill makes it wait for the whole 10 hours.
    trace = Trace(jobs=(TraceJob(1, 0.0, 36_000.0, 8, team="x"), TraceJob(2, 7_200.0, 3_600.0, 4, team="y")))
    cluster = load_cluster("1x8:v100")
    setup = derive_quotas(trace, cluster)
    out = {}
    for name in ("slurm", "tiresias"):
        result = simulate(trace, cluster, setup, PRESETS[name], SimConfig())
        assert summarize(result)["invariant_violations"] == summarize(result)["apply_errors"] == 0
        out[name] = ({j.id: j.jct for j in result.jobs}, result.preemptions)
    assert out["slurm"] == ({1: 36_000.0, 2: 36_000.0 - 7_200.0 + 3_600.0}, 0)
    jct, preemptions = out["tiresias"]
    assert preemptions == 1
    assert jct[2] < 3_600.0 + 600.0  # its run plus the victim's grace period and a cycle
    assert jct[1] > 36_000.0 + 3_600.0  # the victim resumes after it (restart cost included)


def test_continuous_las_keeps_a_victim_stopping_while_it_refreshes_running_jobs_service():
    # Under LAS ordering the simulator refreshes running jobs' attained service every cycle; a victim in
    # its grace period must stay "terminating", or the next cycle (job 3 arrives during the 30 s grace)
    # preempts it a second time.
    from dataclasses import replace

    policy = replace(PRESETS["rota"], name="las", ordering="las")
    jobs = (TraceJob(1, 0.0, 36_000.0, 8, team="x", priority_class="batch"),
            TraceJob(2, 1_000.0, 600.0, 4, team="x"), TraceJob(3, 1_015.0, 600.0, 4, team="x"))
    trace = Trace(jobs=jobs)
    cluster = load_cluster("1x8:v100")
    config = SimConfig(cycle_interval_s=10, skip_idle_cycles=False)
    result = simulate(trace, cluster, derive_quotas(trace, cluster), policy, config)
    summary = summarize(result)
    assert summary["apply_errors"] == summary["invariant_violations"] == 0, summary.get("problems")
    assert result.preemptions == 1
    assert {j.id: j.first_start for j in result.jobs} == {1: 0.0, 2: 1030.0, 3: 1030.0}
