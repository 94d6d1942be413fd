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


def test_it_flags_a_start_in_a_pool_that_does_not_allow_the_jobs_image():
    s = snap([N1], [JobInfo(1, "a", image="x.io/a/b:1", image_pools=frozenset({"research"}))], [quota("a")])
    d = Decisions(starts=(Start(1, (Placement(0),)),))
    assert "pool train does not allow image x.io/a/b:1 (job 1)" in check_invariants(s, d)


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


def test_it_flags_a_start_on_a_device_another_job_holds_whole():
    s = snap([N1], [running(1, "a", (0, 1)), JobInfo(2, "a")], [quota("a")])
    d = Decisions(starts=(Start(2, (Placement(1),)),))
    assert [v for v in check_invariants(s, d) if "over-committed" in v] == [
        "device 1 is over-committed: share 2.000 > 1"]


def test_it_flags_two_running_jobs_on_one_device():
    s = snap([N1], [running(1, "a", (3,)), running(2, "a", (3, 4))], [quota("a")])
    assert [v for v in check_invariants(s, Decisions()) if "over-committed" in v] == [
        "device 3 is over-committed: share 2.000 > 1"]


def test_a_running_job_seen_by_an_earlier_check_is_still_counted():
    """What a job's placements hold is kept between checks per job object: the second check, of the same
    object beside a start on its device, must still see the device as held."""
    holder = running(1, "a", (0,))
    assert check_invariants(snap([N1], [holder], [quota("a")]), Decisions()) == []
    s = snap([N1], [holder, JobInfo(2, "a")], [quota("a", limit=1)])
    problems = check_invariants(s, Decisions(starts=(Start(2, (Placement(0),)),)))
    assert "device 0 is over-committed: share 2.000 > 1" in problems
    assert any("above its limit" in v for v in problems)


def test_it_flags_duplicate_missing_and_unknown_pending_entries():
    s = snap([N1], [JobInfo(1, "a", gpus=4), JobInfo(2, "a"), JobInfo(3, "a", state="held")], [quota("a")])
    d = Decisions(starts=(Start(2, (Placement(0),)),), pending=(
        PendingInfo(1, Reason("Resources", "no room"), 1), PendingInfo(1, Reason("Resources", "no room"), 2),
        PendingInfo(2, Reason("Bogus", "?"), 3), PendingInfo(3, Reason("Resources", "no room"), 4)))
    problems = check_invariants(s, d)
    assert "job 1 (pending) has 2 pending entries, expected 1" in problems
    assert "job 2 waits with unknown reason code Bogus" in problems
    assert "job 2 is both started and pending" in problems
    assert "held job 3 has reason Resources, expected Held" in problems
