"""EASY backfill with reservations from running jobs' time limits, and estimated starts."""

from dataclasses import replace

from scheduler.core import check_invariants, schedule
from scheduler.core import reasons as R
from scheduler.core.types import JobInfo
from tests.core.builders import by_id, gpu_ids, node, quota, running, snap

N1 = node("n1", first_id=0)
QS = [quota("vision"), quota("nlp")]


def _cluster_with_two_free():
    # 6 of 8 busy: 4 until t=2000, 2 until t=5000 (now is 1000).
    return [running(1, "nlp", gpu_ids(N1, 4), started_at=0, time_limit_s=2000),
            running(2, "nlp", gpu_ids(N1, 2, start=4), started_at=0, time_limit_s=5000)]


def test_it_reserves_for_the_blocked_head_job_and_estimates_its_start():
    jobs = _cluster_with_two_free() + [JobInfo(3, "vision", gpus=6, submitted_at=1)]
    d = schedule(snap([N1], jobs, QS, policy="slurm"))
    assert d.pending[0].reason.code == R.RESOURCES
    assert d.pending[0].estimated_start == 2000


def test_it_backfills_a_short_job_that_ends_before_the_reservation():
    jobs = _cluster_with_two_free() + [JobInfo(3, "vision", gpus=6, submitted_at=1),
                                       JobInfo(4, "vision", gpus=2, submitted_at=2, time_limit_s=500)]
    s = snap([N1], jobs, QS, policy="slurm")
    d = schedule(s)
    started, pending = by_id(d)
    assert started == {4}
    assert check_invariants(s, d) == []


def test_it_keeps_a_long_job_off_the_reserved_gpus():
    jobs = _cluster_with_two_free() + [JobInfo(3, "vision", gpus=6, submitted_at=1),
                                       JobInfo(4, "vision", gpus=2, submitted_at=2, time_limit_s=5000)]
    d = schedule(snap([N1], jobs, QS, policy="slurm"))
    started, pending = by_id(d)
    assert started == set()
    assert pending[4].reason.code == R.PRIORITY
    assert "reserved for job 3" in pending[4].reason.message


def test_it_lets_a_long_job_use_the_slack_of_a_reserved_node():
    jobs = _cluster_with_two_free() + [JobInfo(3, "vision", gpus=4, submitted_at=1, nodes=1),
                                       JobInfo(5, "vision", gpus=8, submitted_at=0.5),
                                       JobInfo(4, "vision", gpus=2, submitted_at=2)]
    # Job 5 (8 GPUs) reserves the node at t=5000; job 3 (4 GPUs) fits then too... job 4 has no limit:
    d = schedule(snap([N1], jobs, QS, policy="slurm"))
    started, pending = by_id(d)
    assert pending[5].estimated_start == 5000
    assert started == set()


def test_it_blocks_the_whole_group_behind_the_head_without_backfill():
    jobs = _cluster_with_two_free() + [JobInfo(3, "vision", gpus=6, submitted_at=1),
                                       JobInfo(4, "vision", gpus=1, submitted_at=2, time_limit_s=10)]
    d = schedule(snap([N1], jobs, QS, policy="fifo"))
    started, pending = by_id(d)
    assert started == set()
    assert pending[4].reason.code == R.PRIORITY
    assert "waits behind job 3" in pending[4].reason.message


def test_it_gives_every_waiting_job_an_estimate_or_none_when_unknown():
    jobs = _cluster_with_two_free() + [JobInfo(i, "vision", gpus=4, submitted_at=i, time_limit_s=1000)
                                       for i in range(3, 7)]
    d = schedule(snap([N1], jobs, QS, policy="slurm"))
    est = {p.job_id: p.estimated_start for p in d.pending}
    assert est == {3: 2000, 4: 3000, 5: 4000, 6: 5000}
    forever = [running(1, "nlp", gpu_ids(N1, 8))]  # no time limit: unknown
    d = schedule(snap([N1], forever + [JobInfo(3, "vision", gpus=1)], QS, policy="slurm"))
    assert d.pending[0].estimated_start is None
    assert d.pending[0].reason.code == R.RESOURCES


def test_it_estimates_a_quota_blocked_job_from_its_teams_running_jobs():
    jobs = [running(1, "vision", gpu_ids(N1, 4), started_at=0, time_limit_s=3000), JobInfo(2, "vision", gpus=4)]
    d = schedule(snap([N1], jobs, [quota("vision", limit=4)]))
    assert d.pending[0].reason.code == R.QUOTA_EXCEEDED
    assert d.pending[0].estimated_start == 3000


def test_estimates_can_be_left_out_without_changing_any_decision():
    from dataclasses import replace

    jobs = _cluster_with_two_free() + [JobInfo(i, "vision", gpus=4, submitted_at=i, time_limit_s=1000)
                                       for i in range(3, 7)] + [JobInfo(7, "vision", gpus=1, submitted_at=9)]
    s = snap([N1], jobs, QS, policy="slurm")
    full, lean = schedule(s), schedule(replace(s, estimate_starts=False))
    assert [p.estimated_start for p in full.pending] == [2000, 3000, 4000, 5000]
    assert [p.estimated_start for p in lean.pending] == [None] * 4
    assert lean.starts == full.starts and lean.preemptions == full.preemptions
    assert [(p.job_id, p.reason, p.queue_position) for p in lean.pending] == [
        (p.job_id, p.reason, p.queue_position) for p in full.pending]


def test_the_reserved_reason_says_when_the_reserved_job_starts_in_words():
    jobs = _cluster_with_two_free() + [JobInfo(3, "vision", gpus=6, submitted_at=1),
                                       JobInfo(4, "vision", gpus=2, submitted_at=2, time_limit_s=5000)]
    d = schedule(snap([N1], jobs, QS, policy="slurm", now=1000))
    pending = {p.job_id: p for p in d.pending}
    assert "reserved for job 3, which starts in 17 min;" in pending[4].reason.message
    assert pending[4].reason.details["reserved_start"] == 2000


def test_durations_read_as_words():
    assert [R.fmt_duration(s) for s in (0, 45, 720, 3600, 12000, 90000, 2 * 86400)] == [
        "now", "45 s", "12 min", "1 h", "3 h 20 min", "1 d 1 h", "2 d"]


def test_a_borrowers_reservation_never_keeps_an_owner_from_its_guarantee():
    # gamma (no guarantee) borrows 3 GPUs and reserves the node for its next 4-GPU job; beta's 1-GPU job
    # without a time limit would run past the reserved start, but it is inside beta's guarantee: it takes
    # the free GPU (it used to wait on the borrower's reservation, with nothing to reclaim since it "fit").
    n = node("n1", gpus=4, first_id=0)
    jobs = [running(10, "gamma", (0, 1, 2), priority=800, started_at=0.0, time_limit_s=100.0),
            JobInfo(1, "gamma", gpus=4, priority=800, submitted_at=1),
            JobInfo(2, "beta", gpus=1, priority=100, submitted_at=2)]
    s = snap([n], jobs, [quota("gamma"), quota("beta", guaranteed=1)], now=50.0)
    d = schedule(s)
    started, pending = by_id(d)
    assert started == {2}
    assert d.stats["reservations"] == 1 and pending[1].estimated_start is not None
    assert check_invariants(s, d) == []
    # An owner's reservation still holds: the same with gamma owning its GPUs keeps beta's job off them.
    owned = replace(s, quotas=(quota("gamma", guaranteed=8), quota("beta", guaranteed=1)))
    d = schedule(owned)
    assert d.starts == () and by_id(d)[1][2].reason.code == R.PRIORITY


def test_jobs_ending_at_the_same_moment_all_count_for_a_reservation_whatever_their_order():
    # At t=100 three jobs end together and free 5 devices beside the free one: the 4-GPU job's reservation
    # leaves 2 spare, so a small job without a time limit fits beside it. The reservation used to stop at
    # the first release that made the count reach 4, so the snapshot's job order decided the slack.
    n = node("n1", gpus=6, first_id=0)
    ending = [running(10, "a", (0, 1, 2), time_limit_s=100.0), running(11, "a", (3,), time_limit_s=100.0),
              running(12, "a", (4,), time_limit_s=100.0)]
    pending = [JobInfo(1, "a", gpus=4, priority=800, submitted_at=1),
               JobInfo(2, "a", gpu_fraction=0.25, priority=100, submitted_at=2)]
    outcomes = set()
    for order in (ending, list(reversed(ending))):
        s = snap([n], order + pending, [quota("a")], now=50.0)
        d = schedule(s)
        outcomes.add(tuple(st.job_id for st in d.starts))
    assert outcomes == {(2,)}


def test_look_alikes_in_a_row_are_judged_by_their_own_time_limits():
    """Jobs of one shape right behind each other share a wait only with the same time limit when a
    reservation exists: here the long ones are kept off the reserved GPUs and the short one between them
    backfills."""
    jobs = _cluster_with_two_free() + [
        JobInfo(3, "vision", gpus=6, submitted_at=1),
        JobInfo(4, "vision", gpus=1, submitted_at=2, time_limit_s=5000),
        JobInfo(5, "vision", gpus=1, submitted_at=3, time_limit_s=5000),
        JobInfo(6, "vision", gpus=1, submitted_at=4, time_limit_s=500),
        JobInfo(7, "vision", gpus=1, submitted_at=5, time_limit_s=5000)]
    s = snap([N1], jobs, QS, policy="slurm")
    d = schedule(s)
    started, pending = by_id(d)
    assert started == {6}
    assert {pending[j].reason.code for j in (4, 5, 7)} == {R.PRIORITY}
    assert check_invariants(s, d) == []
