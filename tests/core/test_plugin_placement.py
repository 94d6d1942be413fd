"""The placement plugin: best fit by default, spread on request, fewest nodes for big jobs, and why it waits."""

from scheduler.core import reasons as R
from scheduler.core import schedule
from scheduler.core.plugins import placement
from scheduler.core.session import Session
from scheduler.core.types import JobInfo
from tests.core.builders import gpu_ids, node, quota, running, snap

H100 = "h100-80gb"


def _setup():
    a, b = node("a", gpus=4, first_id=0), node("b", gpus=4, first_id=10)
    s = Session(snap([a, b], [running(1, "t", gpu_ids(a, 2))], [quota("t", guaranteed=8, limit=8)]))
    return s, s.cluster.groups[("train", H100)]


def test_best_fit_takes_the_fullest_node_that_fits_and_spread_the_emptiest():
    s, group = _setup()
    req = s.request(JobInfo(2, "t", gpus=2))
    assert {p.gpu_id // 10 for p in placement.place(s.cluster, group, req, False)} == {0}
    assert {p.gpu_id // 10 for p in placement.place(s.cluster, group, req, True)} == {1}


def test_a_job_larger_than_any_node_gets_the_fewest_nodes():
    s, group = _setup()
    req = s.request(JobInfo(2, "t", gpus=6))
    assert len(placement.place(s.cluster, group, req, False)) == 6


def test_a_job_that_fits_nowhere_waits_with_the_freest_node_and_the_pool_free():
    s, group = _setup()
    req = s.request(JobInfo(2, "t", gpus=8, nodes=1))
    assert placement.place(s.cluster, group, req, False) is None
    reason = placement.waiting(req, group)
    assert reason.code == R.RESOURCES and reason.details["plugin"] == "placement"
    assert reason.details["most_free_on_a_node"] == 4 and reason.details["free_in_pool"] == 6


def test_a_job_no_node_could_ever_hold_is_unsatisfiable_by_placement():
    d = schedule(snap([node("a", gpus=4, first_id=0)], [JobInfo(1, "t", gpus=4, nodes=1, gpu_memory_mb=10**6)],
                      [quota("t", guaranteed=8, limit=8)]))
    assert d.pending[0].reason.code == R.UNSATISFIABLE and d.pending[0].reason.details["plugin"] == "placement"
