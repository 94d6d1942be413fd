"""The gang plugin: a multi-node job gets exactly its nodes, whole, or waits saying how many are ready."""

from scheduler.core import reasons as R
from scheduler.core import schedule
from scheduler.core.plugins import gang
from scheduler.core.session import Session
from scheduler.core.types import JobInfo
from tests.core.builders import gpu_ids, node, quota, running, snap

H100 = "h100-80gb"


def _session(nodes, jobs=()):
    return Session(snap(nodes, list(jobs), [quota("a", guaranteed=32, limit=32), quota("b", guaranteed=32, limit=32)]))


def test_it_places_one_member_on_each_of_distinct_nodes():
    nodes = [node(f"n{i}", gpus=4, first_id=10 * i) for i in range(3)]
    s = _session(nodes)
    job = JobInfo(1, "a", gpus=8, nodes=2)
    placements = gang.place(s.cluster, s.cluster.groups[("train", H100)], s.request(job), 4, 2, None)
    per_node = {p.gpu_id // 10 for p in placements}
    assert len(placements) == 8 and len(per_node) == 2


def test_it_places_nothing_when_one_member_has_no_node():
    nodes = [node("n0", gpus=4, first_id=0), node("n1", gpus=4, first_id=10)]
    s = _session(nodes, [running(5, "b", gpu_ids(nodes[1], 1))])
    job = JobInfo(1, "a", gpus=8, nodes=2)
    assert gang.place(s.cluster, s.cluster.groups[("train", H100)], s.request(job), 4, 2, None) is None
    reason = gang.waiting(s.request(job), s.cluster.groups[("train", H100)])
    assert reason.code == R.GANG_INCOMPLETE and reason.details["nodes_ready"] == 1 and reason.details["nodes"] == 2
    assert reason.details["plugin"] == "gang"


def test_a_single_node_job_is_not_a_gang():
    s = _session([node("n0", gpus=4, first_id=0)])
    req = s.request(JobInfo(1, "a", gpus=2))
    assert not gang.is_gang(req) and gang.waiting(req, s.cluster.groups[("train", H100)]) is None


def test_a_waiting_gang_names_the_gang_plugin_on_its_reason():
    nodes = [node("n0", gpus=4, first_id=0), node("n1", gpus=4, first_id=10)]
    d = schedule(snap(nodes, [running(5, "b", gpu_ids(nodes[1], 1), preemptible=False),
                              JobInfo(1, "a", gpus=8, nodes=2)],
                      [quota("a", guaranteed=8, limit=8), quota("b", guaranteed=1, limit=8)]))
    (info,) = d.pending
    assert info.reason.code == R.GANG_INCOMPLETE and info.reason.details["plugin"] == "gang"
    assert "only 1 of 2 nodes have 4 free GPUs" in info.reason.message
