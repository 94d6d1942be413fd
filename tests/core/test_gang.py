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
