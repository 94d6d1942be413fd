"""check_invariants catches broken decisions (so the property suite can trust it)."""

from scheduler.core import check_invariants
from scheduler.core.types import (
    Decisions,
    JobInfo,
    PendingInfo,
    Placement,
    Preemption,
    Reason,
    Start,
)
from tests.core.builders import gpu_ids, node, quota, running, snap

N1 = node("n1", first_id=0)


def test_it_flags_a_device_shared_over_one():
    s = snap([N1], [running(1, "a", (0,), share=0.5, gpu_fraction=0.5),
                    JobInfo(2, "a", gpu_fraction=0.75)], [quota("a")])
    d = Decisions(starts=(Start(2, (Placement(0, 0.75),)),))
    assert any("over-committed" in v for v in check_invariants(s, d))


def test_it_flags_a_team_pushed_over_its_limit():
    s = snap([N1], [running(1, "a", gpu_ids(N1, 2)), JobInfo(2, "a", gpus=2)], [quota("a", limit=3)])
    d = Decisions(starts=(Start(2, (Placement(2), Placement(3))),))
    assert any("above its limit" in v for v in check_invariants(s, d))


def test_it_flags_a_partial_gang():
    s = snap([N1], [JobInfo(1, "a", gpus=4)], [quota("a")])
    d = Decisions(starts=(Start(1, (Placement(0), Placement(1))),))
    assert any("partial gang" in v for v in check_invariants(s, d))


def test_it_flags_a_waiting_job_without_a_reason():
    s = snap([N1], [JobInfo(1, "a", gpus=4), JobInfo(2, "a")], [quota("a")])
    d = Decisions(pending=(PendingInfo(1, Reason("Resources", "no room"), 1),))
    assert any("job 2" in v for v in check_invariants(s, d))


def test_it_flags_preempting_an_equal_priority_job_without_reclaim():
    s = snap([N1], [running(1, "a", gpu_ids(N1, 8), priority=5), JobInfo(2, "a", gpus=8, priority=5)],
             [quota("a")])
    d = Decisions(preemptions=(Preemption(1, 2, "Priority", "x"),),
                  pending=(PendingInfo(2, Reason("Preempting", "x"), 1),))
    assert any("equal or higher priority" in v for v in check_invariants(s, d))


def test_it_flags_a_start_on_a_model_without_quota():
    s = snap([N1], [JobInfo(1, "b")], [quota("a")])
    d = Decisions(starts=(Start(1, (Placement(0),)),))
    assert any("no quota" in v for v in check_invariants(s, d))
