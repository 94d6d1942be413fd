"""The basic cycle: priority order, FIFO within a priority, quota limits, best-fit, pending reasons."""

from scheduler.core import check_invariants, schedule
from scheduler.core import reasons as R
from scheduler.core.types import HELD, JobInfo
from tests.core.builders import by_id, gpu_ids, node, quota, running, snap, team

H100 = "h100-80gb"


def test_it_starts_a_job_that_fits_on_an_idle_node():
    n1 = node("n1", first_id=0)
    s = snap([n1], [JobInfo(1, "vision", gpus=2)], [quota("vision", limit=8)])
    d = schedule(s)
    assert [st.job_id for st in d.starts] == [1]
    assert [p.gpu_id for p in d.starts[0].placements] == [0, 1]
    assert d.pending == ()
    assert check_invariants(s, d) == []


def test_it_runs_higher_priority_first_even_when_it_arrived_later():
    n1 = node("n1", gpus=4, first_id=0)
    jobs = [JobInfo(1, "vision", gpus=4, priority=100, submitted_at=1),
            JobInfo(2, "vision", gpus=4, priority=500, submitted_at=2)]
    d = schedule(snap([n1], jobs, [quota("vision", limit=8)], policy="fifo"))
    started, pending = by_id(d)
    assert started == {2}
    assert pending[1].reason.code == R.RESOURCES
    assert pending[1].queue_position == 1


def test_it_keeps_arrival_order_within_a_priority():
    n1 = node("n1", gpus=4, first_id=0)
    jobs = [JobInfo(3, "vision", gpus=4, submitted_at=30), JobInfo(1, "vision", gpus=4, submitted_at=10),
            JobInfo(2, "vision", gpus=4, submitted_at=20)]
    d = schedule(snap([n1], jobs, [quota("vision", limit=8)], policy="fifo"))
    assert [s.job_id for s in d.starts] == [1]
    assert [(p.job_id, p.queue_position) for p in d.pending] == [(2, 1), (3, 2)]


def test_it_never_starts_a_job_over_its_team_limit():
    n1 = node("n1", first_id=0)
    jobs = [running(1, "vision", gpu_ids(n1, 4)), JobInfo(2, "vision", gpus=4), JobInfo(3, "vision", gpus=1)]
    s = snap([n1], jobs, [quota("vision", limit=6)])
    d = schedule(s)
    started, pending = by_id(d)
    assert started == {3}
    reason = pending[2].reason
    assert reason.code == R.QUOTA_EXCEEDED
    assert reason.message == "team vision holds 4/6 h100-80gb (limit 6); job needs 4"
    assert dict(reason.details) == {"team": "vision", "gpu_model": H100, "in_use": 4, "limit": 6, "requested": 4,
                                    "plugin": "quota"}
    assert check_invariants(s, d) == []


def test_it_refuses_a_model_the_team_has_no_quota_for():
    n1 = node("n1", first_id=0)
    d = schedule(snap([n1], [JobInfo(1, "nlp", gpus=1, gpu_models=(H100,))], [quota("vision", limit=8)]))
    assert d.starts == ()
    assert d.pending[0].reason.code == R.QUOTA_EXCEEDED
    assert "no quota for h100-80gb" in d.pending[0].reason.message


def test_it_places_on_the_node_that_fits_best():
    n1, n2, n3 = node("n1", first_id=0), node("n2", first_id=100), node("n3", first_id=200)
    jobs = [running(1, "vision", gpu_ids(n1, 2)),  # n1: 6 free
            running(2, "vision", gpu_ids(n2, 5)),  # n2: 3 free
            JobInfo(3, "vision", gpus=3)]
    d = schedule(snap([n1, n2, n3], jobs, [quota("vision")]))
    assert [p.gpu_id for p in d.starts[0].placements] == [105, 106, 107]


def test_it_only_uses_the_accepted_gpu_models():
    a = node("a1", model="a100-40gb", first_id=0)
    h = node("h1", model=H100, first_id=100)
    jobs = [JobInfo(1, "vision", gpus=2, gpu_models=("a100-40gb",))]
    s = snap([a, h], jobs, [quota("vision", model=m) for m in ("a100-40gb", H100)])
    d = schedule(s)
    assert [p.gpu_id for p in d.starts[0].placements] == [0, 1]


def test_it_says_resources_with_numbers_when_no_node_has_room():
    n1 = node("n1", first_id=0)
    jobs = [running(1, "nlp", gpu_ids(n1, 6)), JobInfo(2, "vision", gpus=4)]
    d = schedule(snap([n1], jobs, [quota("vision"), quota("nlp")]))
    reason = d.pending[0].reason
    assert reason.code == R.RESOURCES
    assert reason.details["most_free_on_a_node"] == 2
    assert "needs 4 GPUs of h100-80gb" in reason.message


def test_it_gives_held_jobs_the_held_reason_and_never_starts_them():
    n1 = node("n1", first_id=0)
    s = snap([n1], [JobInfo(1, "vision", state=HELD)], [quota("vision")])
    d = schedule(s)
    assert d.starts == ()
    assert d.pending[0].reason.code == R.HELD
    assert check_invariants(s, d) == []


def test_held_jobs_stand_nowhere_in_the_queue_and_take_no_position_from_others():
    from dataclasses import replace

    n1 = node("n1", gpus=4, first_id=0)
    jobs = [running(9, "vision", gpu_ids(n1, 4)), JobInfo(1, "vision", gpus=4, submitted_at=1, state=HELD),
            JobInfo(2, "vision", gpus=4, submitted_at=2), JobInfo(3, "vision", gpus=4, submitted_at=3)]
    s = snap([n1], jobs, [quota("vision", limit=8)], policy="fifo")
    for snapshot in (s, replace(s, estimate_starts=False)):  # with or without estimated starts
        d = schedule(snapshot)
        assert [(p.job_id, p.queue_position) for p in d.pending] == [(1, None), (2, 1), (3, 2)]
        assert d.pending[0].estimated_start is None


def test_it_marks_a_job_larger_than_any_node_with_a_fixed_node_count_unsatisfiable():
    n1 = node("n1", first_id=0)
    d = schedule(snap([n1], [JobInfo(1, "vision", gpus=16, nodes=1)], [quota("vision")]))
    reason = d.pending[0].reason
    assert reason.code == R.UNSATISFIABLE
    assert "the largest node has 8" in reason.message
    assert d.pending[0].estimated_start is None


def test_it_never_places_on_unschedulable_nodes_or_unhealthy_gpus():
    down = node("n0", first_id=0, schedulable=False)
    sick = node("n1", first_id=100, unhealthy={0, 1})
    s = snap([down, sick], [JobInfo(1, "vision", gpus=6), JobInfo(2, "vision", gpus=1)], [quota("vision")])
    d = schedule(s)
    assert [p.gpu_id for p in d.starts[0].placements] == [102, 103, 104, 105, 106, 107]
    assert d.pending[0].reason.code == R.RESOURCES
    assert check_invariants(s, d) == []


def test_it_says_nodes_unhealthy_when_only_broken_nodes_could_hold_the_job():
    down = node("n0", first_id=0, schedulable=False)
    d = schedule(snap([down], [JobInfo(1, "vision", gpus=2)], [quota("vision")]))
    assert d.pending[0].reason.code == R.NODES_UNHEALTHY
    assert "n0" in d.pending[0].reason.message


def test_nodes_unhealthy_names_only_the_broken_nodes_and_counts_the_usable_ones():
    """A 2-node gang with one of its two possible nodes down: the healthy one is not named as broken."""
    down, fine = node("n0", first_id=0, schedulable=False), node("n1", first_id=10)
    d = schedule(snap([down, fine], [JobInfo(1, "vision", gpus=16, nodes=2)], [quota("vision")]))
    reason = d.pending[0].reason
    assert reason.code == R.NODES_UNHEALTHY
    assert reason.details["nodes"] == ["n0"] and reason.details["usable_nodes"] == 1
    assert reason.message.endswith("unhealthy GPUs: n0; 1 usable node(s) are not enough")


def test_it_returns_the_same_decisions_for_the_same_snapshot():
    nodes = [node(f"n{i}", first_id=i * 10) for i in range(4)]
    jobs = [JobInfo(i, f"t{i % 3}", gpus=1 + i % 4, priority=i % 2, submitted_at=i % 5) for i in range(30)]
    s = snap(nodes, jobs, [quota(f"t{i}", limit=12) for i in range(3)])
    assert schedule(s) == schedule(s)


def test_it_pauses_the_garbage_collector_only_during_the_cycle():
    import gc

    n = node("n1")
    s = snap([n], [JobInfo(id=1, team="a", gpus=1)], [quota("a", guaranteed=8)])
    assert gc.isenabled()
    schedule(s)
    assert gc.isenabled()
    gc.disable()
    try:
        schedule(s)
        assert not gc.isenabled()  # a caller that turned it off keeps it off
    finally:
        gc.enable()


def test_a_job_larger_than_its_teams_limit_is_told_it_cannot_start_until_the_limit_is_raised():
    n1 = node("n1", first_id=0)
    s = snap([n1], [JobInfo(1, "vision", gpus=7), JobInfo(2, "vision", gpus=6)], [quota("vision", limit=6)])
    d = schedule(s)
    assert [st.job_id for st in d.starts] == [2]
    reason = by_id(d)[1][1].reason
    assert reason.code == R.QUOTA_EXCEEDED and reason.message == (
        "team vision holds 0/6 h100-80gb (limit 6); job needs 7; more than the limit: it cannot start unless the "
        "limit is raised")
    assert by_id(d)[1][1].estimated_start is None


def test_a_job_refused_by_quota_on_every_model_it_accepts_is_told_about_each():
    """An any-model job whose team is at its A100 limit and its H100 limit hears of both limits (it was told
    only of the first model's, while H100s sat idle beside it)."""
    a100, h100 = node("a1", "a100-40gb", gpus=4, pool="p"), node("h1", "h100-80gb", gpus=8, pool="p")
    jobs = [running(1, "vision", gpu_ids(a100, 2), gpu_models=("a100-40gb",)),
            running(2, "vision", gpu_ids(h100, 4), gpu_models=("h100-80gb",)),
            JobInfo(id=3, team="vision", gpus=1, submitted_at=10.0)]
    quotas = [quota("vision", "a100-40gb", guaranteed=1, limit=2), quota("vision", "h100-80gb", guaranteed=2, limit=4)]
    _started, pending = by_id(schedule(snap([a100, h100], jobs, quotas, teams=[team("vision")])))
    reason = pending[3].reason
    assert reason.code == "QuotaExceeded"
    assert "holds 2/2 a100-40gb" in reason.message and "holds 4/4 h100-80gb" in reason.message
    assert [m["gpu_model"] for m in reason.details["per_model"]] == ["a100-40gb", "h100-80gb"]
    assert reason.details["gpu_model"] == "a100-40gb" and reason.details["limit"] == 2
