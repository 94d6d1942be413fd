"""Figures of merit on hand-made results: percentiles, Jain's index, shares, and the table."""

import pytest

from scheduler.sim.metrics import jain_index, percentile, summarize
from scheduler.sim.report import format_table
from scheduler.sim.results import JobRecord, SimResult


def test_percentiles_interpolate_between_ranks():
    values = [10.0, 20.0, 30.0, 40.0]
    assert percentile(values, 50) == 25.0
    assert percentile(values, 100) == 40.0
    assert percentile(values, 0) == 10.0
    assert percentile([], 99) == 0.0


def test_jains_index_is_one_when_equal_and_one_over_n_when_one_takes_all():
    assert jain_index([2.0, 2.0, 2.0]) == pytest.approx(1.0)
    assert jain_index([1.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)
    assert jain_index([1.0, 3.0]) == pytest.approx(16 / 20)


def hand_result() -> SimResult:
    result = SimResult(policy="fifo", capacity=4, span_s=100.0, offered_gpu_s=300.0)
    result.jobs = [
        JobRecord(1, "a", submit=0, duration=50, gpus=2, first_start=0, end=50),
        JobRecord(2, "a", submit=0, duration=50, gpus=2, first_start=50, end=100),
        JobRecord(
            3, "b", submit=10, duration=100, gpus=1, first_start=10, end=110, preemptions=1, lost_gpu_s=20
        ),
    ]
    result.useful_gpu_s, result.allocated_gpu_s, result.lost_gpu_s = 290.0, 300.0, 20.0
    result.teams = {"a": (150.0, 0.0, 0.0), "b": (50.0, 30.0, 20.0)}
    result.guaranteed = {"a": 3.0, "b": 1.0}
    return result


def test_it_summarizes_jct_queueing_utilization_and_teams_of_a_hand_made_result():
    s = summarize(hand_result())
    assert s["avg_jct_s"] == pytest.approx((50 + 100 + 100) / 3)
    assert s["jct_lower_bound_s"] == pytest.approx(200 / 3)
    assert s["avg_queue_s"] == pytest.approx(50 / 3)
    assert s["makespan_s"] == 110
    assert s["utilization"] == pytest.approx(290 / 400)
    assert s["utilization_allocated"] == pytest.approx(300 / 400)
    assert s["utilization_bound"] == pytest.approx(300 / 400)
    assert s["gpu_hours_lost"] == pytest.approx(20 / 3600)
    a, b = s["teams"]["a"], s["teams"]["b"]
    assert (a["entitlement_share"], a["offered_share"], a["received_share"]) == (
        0.75,
        pytest.approx(2 / 3),
        0.75,
    )
    assert (b["starved_s"], b["preemptions"], b["avg_slowdown"]) == (30.0, 1, 1.0)
    assert (b["longest_starved_s"], s["worst_starved_s"], s["longest_starved_s"]) == (20.0, 30.0, 20.0)
    assert a["avg_slowdown"] == pytest.approx(1.5)  # JCTs 50 and 100 for 50 s of work each
    assert s["jain_slowdown"] == pytest.approx(jain_index([1 / 1.5, 1.0]))
    assert s["jain_share"] == pytest.approx(1.0)  # both received exactly their entitlement


def test_the_table_puts_policies_side_by_side():
    text = format_table([summarize(hand_result()), {**summarize(hand_result()), "policy": "rota"}])
    assert text.splitlines()[0].split() == ["metric", "fifo", "rota"]
    assert "avg JCT" in text and "0.02 h" in text
