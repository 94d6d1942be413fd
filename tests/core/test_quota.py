"""Quotas: guarantees, borrowing up to the limit split by weight, parent caps, never-lent parts,
non-preemptible work inside the guarantee."""

from dataclasses import replace

from scheduler.core import check_invariants, schedule
from scheduler.core import reasons as R
from scheduler.core.types import JobInfo
from tests.core.builders import by_id, gpu_ids, node, quota, running, snap, team


def test_it_lets_a_team_borrow_idle_capacity_up_to_its_limit():
    n1 = node("n1", first_id=0)
    jobs = [JobInfo(i, "vision", gpus=2, submitted_at=i) for i in range(1, 5)]
    s = snap([n1], jobs, [quota("vision", guaranteed=2, limit=6), quota("nlp", guaranteed=6, limit=8)])
    d = schedule(s)
    started, pending = by_id(d)
    assert started == {1, 2, 3}
    assert [st.borrowed for st in d.starts] == [0, 2, 2]
    assert pending[4].reason.code == R.QUOTA_EXCEEDED
    assert check_invariants(s, d) == []


def test_it_splits_borrowable_capacity_between_borrowers_by_weight():
    n1, n2 = node("n1", first_id=0), node("n2", first_id=100)
    jobs = [JobInfo(i, "vision", gpus=1, submitted_at=i) for i in range(1, 17)]
    jobs += [JobInfo(100 + i, "nlp", gpus=1, submitted_at=i + 0.5) for i in range(1, 17)]
    qs = [quota("vision", weight=2), quota("nlp", weight=1)]
    d = schedule(snap([n1, n2], jobs, qs, policy="fifo"))
    started, pending = by_id(d)
    vision = sum(1 for j in started if j < 100)
    nlp = sum(1 for j in started if j > 100)
    # Shares: 16 * 2/3 = 10.67 and 16 * 1/3 = 5.33. nlp may go past its share only while it leaves vision
    # enough idle GPUs to reach its own whole share (10); no GPU stays idle.
    assert (vision, nlp) == (10, 6)
    assert pending[107].reason.code == R.OVER_LIMIT
    assert "weighted share" in pending[107].reason.message


def test_it_caps_children_with_their_parents_limit():
    n1 = node("n1", first_id=0)
    teams = [team("research"), team("vision", parent="research"), team("nlp", parent="research")]
    jobs = [running(1, "nlp", gpu_ids(n1, 3)), JobInfo(2, "vision", gpus=2)]
    qs = [quota("research", limit=4), quota("vision", limit=8), quota("nlp", limit=8)]
    s = snap([n1], jobs, qs, teams)
    d = schedule(s)
    reason = d.pending[0].reason
    assert reason.code == R.OVER_LIMIT
    assert reason.message == "parent team research of vision holds 3/4 h100-80gb (limit 4); job needs 2"
    assert reason.details["in_use"] == 3
    assert check_invariants(s, d) == []


def test_it_never_lends_the_non_lendable_part_of_a_guarantee():
    n1 = node("n1", first_id=0)
    jobs = [JobInfo(i, "nlp", gpus=1, submitted_at=i) for i in range(1, 9)]
    qs = [quota("vision", guaranteed=4, non_lendable=3, limit=8), quota("nlp", limit=8)]
    d = schedule(snap([n1], jobs, qs))
    started, pending = by_id(d)
    assert len(started) == 5
    assert pending[6].reason.code == R.RESOURCES
    assert "never lent" in pending[6].reason.message


def test_it_keeps_non_preemptible_work_inside_the_guarantee():
    n1 = node("n1", first_id=0)
    jobs = [JobInfo(1, "serving", gpus=2, preemptible=False), JobInfo(2, "serving", gpus=2, preemptible=False),
            JobInfo(3, "serving", gpus=2)]
    s = snap([n1], jobs, [quota("serving", guaranteed=3, limit=8)])
    d = schedule(s)
    started, pending = by_id(d)
    assert started == {1, 3}
    assert pending[2].reason.code == R.NON_PREEMPTIBLE_OVER_QUOTA
    assert pending[2].reason.details == {"team": "serving", "gpu_model": "h100-80gb", "in_use": 2,
                                         "guaranteed": 3, "requested": 2, "never": False,
                                         "plugin": "quota"}
    assert "cannot start" not in pending[2].reason.message  # it starts once job 1 ends
    assert check_invariants(s, d) == []


def test_non_preemptible_work_larger_than_the_whole_guarantee_is_told_it_cannot_start():
    n1 = node("n1", first_id=0)
    s = snap([n1], [JobInfo(1, "serving", gpus=4, preemptible=False)], [quota("serving", guaranteed=2, limit=8)])
    reason = schedule(s).pending[0].reason
    assert reason.code == R.NON_PREEMPTIBLE_OVER_QUOTA and reason.details["never"] is True
    assert reason.message.endswith("it cannot start unless the guarantee is raised or it is made preemptible")


def test_it_stops_at_the_guarantee_when_borrowing_is_off():
    n1 = node("n1", first_id=0)
    s = snap([n1], [JobInfo(1, "vision", gpus=4)], [quota("vision", guaranteed=2, limit=8)])
    s = replace(s, policy=replace(s.policy, borrowing=False))
    d = schedule(s)
    assert d.pending[0].reason.code == R.QUOTA_EXCEEDED
    assert "borrowing off" in d.pending[0].reason.message


def test_it_counts_fractions_against_quota():
    n1 = node("n1", first_id=0, gpus=2)
    jobs = [JobInfo(i, "vision", gpu_fraction=0.5, submitted_at=i) for i in range(1, 5)]
    s = snap([n1], jobs, [quota("vision", limit=1.5)])
    d = schedule(s)
    started, pending = by_id(d)
    assert started == {1, 2, 3}
    assert pending[4].reason.message == "team vision holds 1.5/1.5 h100-80gb (limit 1.5); job needs 0.5"


def test_work_inside_its_guarantee_starts_before_work_that_would_borrow():
    """Freed capacity goes to its owner first: b's job fits b's guarantee, a's would borrow it. a is
    earlier in the queue, yet b starts; a strict-order policy (guarantee_first off) starts a instead."""
    n = node("n1", gpus=4, first_id=0)
    jobs = [JobInfo(1, "a", gpus=4, submitted_at=1), JobInfo(2, "b", gpus=4, submitted_at=2)]
    quotas = [quota("a", guaranteed=0, limit=4), quota("b", guaranteed=4, limit=4)]
    s = snap([n], jobs, quotas)
    assert [st.job_id for st in schedule(s).starts] == [2]
    strict = replace(s, policy=replace(s.policy, guarantee_first=False))
    assert [st.job_id for st in schedule(strict).starts] == [1]


def test_a_teams_own_order_is_kept_when_its_head_would_borrow():
    """b's 4-GPU head would borrow; b's later 1-GPU job fits the guarantee but must not jump its own head."""
    n = node("n1", gpus=8, first_id=0)
    jobs = [JobInfo(1, "b", gpus=4, submitted_at=1), JobInfo(2, "b", gpus=1, submitted_at=2)]
    d = schedule(snap([n], jobs, [quota("b", guaranteed=2, limit=4)]))
    started, pending = by_id(d)
    assert list(started) == [1]
    assert pending[2].reason.code == R.QUOTA_EXCEEDED


def test_a_teams_head_on_another_model_does_not_hold_back_its_work_inside_the_guarantee():
    """b's head wants an a100 it would borrow; b's next job wants an h100 inside b's guarantee. It goes in
    the first pass, before c's borrowing 2-GPU job reserves the free h100 (it used to wait behind that
    reservation while c borrowed: the team's order was kept across models)."""
    h100 = node("h", gpus=2, first_id=0)
    a100 = node("a", model="a100-40gb", gpus=1, first_id=10)
    jobs = [running(10, "c", (0,), time_limit_s=100.0), running(11, "c", (10,), time_limit_s=100.0),
            JobInfo(1, "c", gpus=2, gpu_models=("h100-80gb",), submitted_at=1),
            JobInfo(2, "b", gpus=1, gpu_models=("a100-40gb",), submitted_at=2),
            JobInfo(3, "b", gpus=1, gpu_models=("h100-80gb",), submitted_at=3)]
    quotas = [quota("b", guaranteed=1), quota("b", "a100-40gb"), quota("c"), quota("c", "a100-40gb")]
    s = snap([h100, a100], jobs, quotas)
    d = schedule(s)
    started, pending = by_id(d)
    assert started == {3}
    assert pending[2].reason.code == R.RESOURCES
    assert check_invariants(s, d) == []
