"""Gangs: multi-GPU and multi-node jobs start all-or-nothing, on one node when they fit, else the fewest."""

from scheduler.core import check_invariants, schedule
from scheduler.core import reasons as R
from scheduler.core.types import JobInfo
from tests.core.builders import gpu_ids, node, quota, running, snap


def _nodes(k):
    return [node(f"n{i}", first_id=i * 100) for i in range(k)]


def test_it_places_a_multi_node_gang_on_exactly_the_requested_nodes():
    nodes = _nodes(3)
    s = snap(nodes, [JobInfo(1, "vision", gpus=8, nodes=2)], [quota("vision")])
    d = schedule(s)
    used = {p.gpu_id // 100 for p in d.starts[0].placements}
    assert len(used) == 2 and len(d.starts[0].placements) == 8
    assert check_invariants(s, d) == []


def test_it_puts_a_job_larger_than_one_node_on_the_fewest_nodes():
    nodes = _nodes(4)
    jobs = [running(1, "nlp", gpu_ids(nodes[0], 4)), JobInfo(2, "vision", gpus=20)]
    s = snap(nodes, jobs, [quota("vision"), quota("nlp", guaranteed=4)])
    d = schedule(s)
    used = {p.gpu_id // 100 for p in d.starts[0].placements}
    assert len(used) == 3 and len(d.starts[0].placements) == 20
    assert check_invariants(s, d) == []


def test_it_never_splits_a_job_that_fits_on_one_node():
    nodes = _nodes(2)
    jobs = [running(1, "nlp", gpu_ids(nodes[0], 4)), running(2, "nlp", gpu_ids(nodes[1], 4)),
            JobInfo(3, "vision", gpus=8)]
    d = schedule(snap(nodes, jobs, [quota("vision"), quota("nlp")]))
    assert d.starts == ()
    assert d.pending[0].reason.code == R.RESOURCES


def test_it_says_gang_incomplete_when_only_some_members_fit():
    nodes = _nodes(3)
    jobs = [running(1, "nlp", gpu_ids(nodes[0], 6)), running(2, "nlp", gpu_ids(nodes[1], 6)),
            JobInfo(3, "vision", gpus=12, nodes=3)]
    d = schedule(snap(nodes, jobs, [quota("vision"), quota("nlp")]))
    assert d.starts == ()
    assert d.pending[0].reason.code == R.GANG_INCOMPLETE
    assert d.pending[0].reason.details["nodes_ready"] == 1


def test_it_rejects_a_gang_that_does_not_split_evenly():
    d = schedule(snap(_nodes(2), [JobInfo(1, "vision", gpus=7, nodes=2)], [quota("vision")]))
    assert d.pending[0].reason.code == R.UNSATISFIABLE


def test_it_rejects_a_gang_needing_more_nodes_than_exist():
    d = schedule(snap(_nodes(2), [JobInfo(1, "vision", gpus=24, nodes=3)], [quota("vision")]))
    assert d.pending[0].reason.code == R.UNSATISFIABLE
    assert "not enough nodes" in d.pending[0].reason.message


# Jobs larger than one node with ``nodes`` unset: reserved for and preempted for like gangs of the fewest
# nodes, so a stream of small jobs cannot starve them.


def _busy_until(nodes, ends):
    """Node i fully busy with an nlp job until ``ends[i]`` (now is 1000)."""
    return [running(10 + i, "nlp", gpu_ids(n, 8), started_at=0, time_limit_s=end)
            for i, (n, end) in enumerate(zip(nodes, ends, strict=True))]


def test_it_reserves_the_fewest_nodes_for_a_job_larger_than_one_node():
    nodes = _nodes(3)
    jobs = _busy_until(nodes, (2000, 3000, 9000)) + [
        JobInfo(1, "vision", gpus=16, submitted_at=1),
        JobInfo(2, "vision", gpus=1, submitted_at=2, time_limit_s=500),  # ends by t=1500: may backfill
        JobInfo(3, "vision", gpus=1, submitted_at=3)]  # no time limit: must keep off the reserved nodes
    s = snap(nodes, jobs, [quota("vision"), quota("nlp")], policy="slurm", now=1000)
    d = schedule(s)
    assert check_invariants(s, d) == []
    pending = {p.job_id: p for p in d.pending}
    assert pending[1].estimated_start == 3000  # n0 frees at 2000, n1 at 3000: both by 3000
    assert d.stats["reservations"] == 1
    # Nothing is free now, so nothing starts; free one node's devices and check the backfill rule there.
    freed = [j for j in jobs if j.id != 10]
    s = snap(nodes, freed, [quota("vision"), quota("nlp")], policy="slurm", now=1000)
    d = schedule(s)
    started = {st.job_id for st in d.starts}
    pending = {p.job_id: p for p in d.pending}
    assert started == {2}
    assert pending[3].reason.code == R.PRIORITY and "reserved for job 1" in pending[3].reason.message
    assert check_invariants(s, d) == []


def test_it_reserves_a_remainder_part_on_a_separate_node():
    nodes = _nodes(3)
    jobs = _busy_until(nodes, (2000, 4000, 3000)) + [JobInfo(1, "vision", gpus=12, submitted_at=1)]
    d = schedule(snap(nodes, jobs, [quota("vision"), quota("nlp")], policy="slurm", now=1000))
    # 8 on n0 (free at 2000) and 4 on the next node to free up (n2 at 3000), not on n0 again.
    assert d.stats["reservations"] == 1
    assert d.pending[0].estimated_start == 3000


def test_it_reclaims_on_several_nodes_for_a_job_larger_than_one_node():
    nodes = _nodes(2)
    jobs = [running(1, "nlp", gpu_ids(nodes[0], 8), started_at=10),
            running(2, "nlp", gpu_ids(nodes[1], 8), started_at=20),
            JobInfo(3, "vision", gpus=16, priority=100)]
    qs = [quota("vision", guaranteed=16, limit=16), quota("nlp", guaranteed=0, limit=16)]
    s = snap(nodes, jobs, qs)
    d = schedule(s)
    assert sorted((p.job_id, p.reason) for p in d.preemptions) == [(1, "Reclaim"), (2, "Reclaim")]
    assert d.pending[0].reason.code == R.PREEMPTING
    assert check_invariants(s, d) == []


def test_it_combines_a_free_node_with_victims_on_another():
    nodes = _nodes(2)
    jobs = [running(1, "nlp", gpu_ids(nodes[1], 4), started_at=10),
            running(2, "nlp", gpu_ids(nodes[1], 4, start=4), started_at=20),
            JobInfo(3, "vision", gpus=12, priority=100)]
    qs = [quota("vision", guaranteed=16, limit=16), quota("nlp", guaranteed=0, limit=16)]
    s = snap(nodes, jobs, qs)
    d = schedule(s)
    # n0 is idle (8 of the 12); 4 more come from the most recently started nlp job on n1.
    assert [(p.job_id, p.reason) for p in d.preemptions] == [(2, "Reclaim")]
    assert check_invariants(s, d) == []
    # Next cycle the victim is stopping: the job holds n0 and waits; nothing more is preempted.
    from dataclasses import replace
    stopping = [jobs[0], replace(jobs[1], terminating=True), jobs[2]]
    s2 = snap(nodes, stopping + [JobInfo(4, "nlp", gpus=8, priority=100, submitted_at=5)], qs)
    d2 = schedule(s2)
    assert d2.preemptions == () and d2.starts == ()
    pending = {p.job_id: p for p in d2.pending}
    assert pending[3].reason.code == R.PREEMPTING
    assert check_invariants(s2, d2) == []
    # The victim is gone: the job starts on both nodes.
    d3 = schedule(snap(nodes, [jobs[0], jobs[2]], qs))
    assert [st.job_id for st in d3.starts] == [3]
    assert {p.gpu_id // 100 for p in d3.starts[0].placements} == {0, 1}
