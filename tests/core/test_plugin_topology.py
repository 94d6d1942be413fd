"""Topology-aware gangs: inside one switch (or NVLink domain) when one could hold them, best fit among
blocks, a ``Topology`` reason while they wait for one, spanning only when no block ever could."""

import random

from scheduler.core import check_invariants, schedule, topology
from scheduler.core import reasons as R
from scheduler.core.plugins import gang
from scheduler.core.session import Session
from scheduler.core.topology import NVLINK_DOMAIN, SWITCH
from scheduler.core.types import JobInfo
from tests.core.builders import gpu_ids, node, quota, running, snap

H100 = "h100-80gb"
QUOTAS = [quota("a", guaranteed=64, limit=64), quota("b", guaranteed=64, limit=64)]


def _nodes(layout, gpus=8):
    """Nodes named n0, n1, ... with the switch (and NVLink domain) labels of ``layout``."""
    out = []
    for i, labels in enumerate(layout):
        if isinstance(labels, str):
            labels = {SWITCH: labels} if labels else {}
        out.append(node(f"n{i}", gpus=gpus, first_id=100 * i, labels=labels))
    return out


def _switch_of(nodes, placements):
    by_id = {g.id: n for n in nodes for g in n.gpus}
    return {by_id[p.gpu_id].labels.get(SWITCH) for p in placements}, {by_id[p.gpu_id].name for p in placements}


def _place(nodes, job, jobs=()):
    s = Session(snap(nodes, list(jobs), QUOTAS))
    group = s.cluster.groups[("train", H100)]
    req = s.request(job)
    return s, group, req, gang.place(s.cluster, group, req, req.gpus // req.nodes, req.nodes, None)


def test_a_gang_lands_inside_one_switch_the_tightest_that_fits():
    # Flat best fit would take n0 and n1 (name order): two switches. Switch "b" has 3 free nodes, "a" has 2:
    # "a" fits the gang exactly, so the gang goes there and "b" keeps its nodes whole.
    nodes = _nodes(["a", "b", "a", "b", "b"])
    _s, _g, _r, placements = _place(nodes, JobInfo(1, "a", gpus=16, nodes=2))
    switches, names = _switch_of(nodes, placements)
    assert switches == {"a"} and names == {"n0", "n2"}


def test_without_topology_labels_the_gang_is_placed_as_before():
    nodes = _nodes(["", "", "", "", ""])
    _s, _g, _r, placements = _place(nodes, JobInfo(1, "a", gpus=16, nodes=2))
    assert _switch_of(nodes, placements)[1] == {"n0", "n1"}


def test_an_nvlink_domain_that_fits_comes_before_the_rest_of_its_switch():
    layout = [{SWITCH: "a"}, {SWITCH: "a", NVLINK_DOMAIN: "r1"}, {SWITCH: "a"}, {SWITCH: "a", NVLINK_DOMAIN: "r1"}]
    nodes = _nodes(layout)
    _s, _g, _r, placements = _place(nodes, JobInfo(1, "a", gpus=16, nodes=2))
    assert _switch_of(nodes, placements)[1] == {"n1", "n3"}


def test_a_gang_that_one_switch_could_hold_waits_for_it_and_says_so():
    # Switch "a" has 3 nodes (one busy), "b" has 2: 4 free nodes in all, but at most 2 in one switch.
    nodes = _nodes(["a", "a", "a", "b", "b"])
    busy = running(9, "b", gpu_ids(nodes[0], 1), preemptible=False)
    d = schedule(snap(nodes, [busy, JobInfo(1, "a", gpus=24, nodes=3)], QUOTAS))
    assert not d.starts and not d.preemptions
    (info,) = d.pending
    reason = info.reason
    assert reason.code == R.TOPOLOGY and reason.details["plugin"] == "gang"
    assert reason.details["largest_free_block_nodes"] == 2 and reason.details["nodes"] == 3
    assert reason.details["nodes_ready"] == 4 and reason.details["block"] == "a"
    assert "largest free block has 2 of 3 nodes with 8 free GPUs (switch a)" in reason.message


def test_the_same_wait_without_labels_starts_across_nodes():
    nodes = _nodes(["", "", "", "", ""])
    busy = running(9, "b", gpu_ids(nodes[0], 1), preemptible=False)
    d = schedule(snap(nodes, [busy, JobInfo(1, "a", gpus=24, nodes=3)], QUOTAS))
    assert [s.job_id for s in d.starts] == [1]


def test_a_gang_bound_to_a_switch_preempts_inside_that_switch():
    # Free nodes n1, n3, n4 would do on a flat cluster; inside switch "a" the gang needs n0 back.
    nodes = _nodes(["a", "a", "a", "b", "b"])
    low = running(9, "a", gpu_ids(nodes[0], 1), priority=0)
    d = schedule(snap(nodes, [low, JobInfo(1, "a", gpus=24, nodes=3, priority=10)], QUOTAS))
    assert [p.job_id for p in d.preemptions] == [9] and d.pending[0].reason.code == R.PREEMPTING


def test_a_gang_bound_to_a_switch_does_not_preempt_in_another_switch():
    # Switch "a" is held by non-preemptible work; the only victim sits in switch "b", too small for the gang.
    nodes = _nodes(["a", "a", "a", "b", "b"])
    jobs = [running(8, "b", gpu_ids(nodes[0], 1), preemptible=False), running(9, "a", gpu_ids(nodes[3], 1)),
            JobInfo(1, "a", gpus=24, nodes=3, priority=10)]
    d = schedule(snap(nodes, jobs, QUOTAS))
    assert not d.preemptions and d.pending[0].reason.code == R.TOPOLOGY


def test_a_gang_no_switch_could_ever_hold_spans_switches():
    nodes = _nodes(["a", "a", "b", "b"])
    d = schedule(snap(nodes, [JobInfo(1, "a", gpus=24, nodes=3)], QUOTAS))
    (start,) = d.starts
    assert _switch_of(nodes, start.placements)[0] == {"a", "b"}


def test_a_gang_short_of_nodes_everywhere_is_still_incomplete_not_topology():
    nodes = _nodes(["a", "a", "a", "b"])
    busy = [running(9, "b", gpu_ids(nodes[0], 1), preemptible=False),
            running(10, "b", gpu_ids(nodes[3], 1), preemptible=False)]
    d = schedule(snap(nodes, [*busy, JobInfo(1, "a", gpus=24, nodes=3)], QUOTAS))
    assert d.pending[0].reason.code == R.GANG_INCOMPLETE


def test_unhealthy_or_unlabelled_nodes_do_not_make_a_switch_able_to_hold_a_gang():
    nodes = _nodes(["a", "a", "", "b"])
    nodes[1] = node("n1", gpus=8, first_id=100, labels={SWITCH: "a"}, schedulable=False)
    s, group, req, placements = _place(nodes, JobInfo(1, "a", gpus=16, nodes=2))
    assert not gang.bound_to_block(group, req) and placements is not None


def test_a_bound_gang_reserves_inside_one_switch():
    # n1, n2 (switch a) and n4 (switch b) are free now, but the gang can only start in switch a once the
    # job on n0 ends (at 1,100): that is its reservation, not "now" across switches.
    nodes = _nodes(["a", "a", "a", "b", "b"])
    jobs = [running(8, "b", gpu_ids(nodes[0], 1), preemptible=False, started_at=1000.0, time_limit_s=100.0),
            running(9, "b", gpu_ids(nodes[3], 1), preemptible=False, started_at=1000.0, time_limit_s=50.0)]
    s, group, req, placements = _place(nodes, JobInfo(1, "a", gpus=24, nodes=3), jobs)
    assert placements is None
    bound = s.timeline.reserve(group, req, 1, topology.block_orders(group))
    assert bound.start == 1100.0 and sorted(bound.slack) == [0, 1, 2]
    assert s.timeline.reserve(group, req, 1).start == 1000.0  # flat: n1, n2 and n4 now
    d = schedule(snap(nodes, [*jobs, JobInfo(1, "a", gpus=24, nodes=3)], QUOTAS))
    assert d.pending[-1].reason.code == R.TOPOLOGY and d.pending[-1].estimated_start == 1100.0


def test_random_labelled_clusters_never_spread_a_gang_one_block_could_hold():
    spans = inside = 0
    for seed in range(40):
        rng = random.Random(seed)
        layout = [{SWITCH: f"s{rng.randrange(3)}"} if rng.random() < 0.9 else {} for _ in range(rng.randrange(4, 12))]
        nodes = _nodes(layout, gpus=4)
        jobs = [running(100 + i, "b", gpu_ids(n, rng.randrange(0, 5)), preemptible=False)
                for i, n in enumerate(nodes) if rng.random() < 0.4]
        jobs = [j for j in jobs if j.placements]
        jobs += [JobInfo(i + 1, "a", gpus=4 * k, nodes=k, submitted_at=i) for i, k in
                 enumerate(rng.choice((2, 3, 4)) for _ in range(4))]
        s = snap(nodes, jobs, QUOTAS)
        d = schedule(s)
        assert check_invariants(s, d) == []
        switch_size = {}
        for n in nodes:
            if n.labels:
                switch_size[n.labels[SWITCH]] = switch_size.get(n.labels[SWITCH], 0) + 1
        for start in d.starts:
            switches, names = _switch_of(nodes, start.placements)
            if len(switches) == 1 and None not in switches:
                inside += 1
            else:
                spans += 1
                assert max(switch_size.values(), default=0) < len(names), (seed, start)
    assert inside and spans  # both cases occur in these 40 clusters
