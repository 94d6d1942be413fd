"""The cluster's working copy between cycles: holds of running jobs are reused for the same job or an equal
copy of it (the live cycle reads new objects from the database every time), and rebuilt when it changed."""

from dataclasses import replace

from scheduler.core import cluster as cluster_module
from scheduler.core import schedule
from scheduler.core.cluster import Cluster
from scheduler.core.types import JobInfo
from tests.core.builders import gpu_ids, node, quota, running, snap


def holds(snapshot):
    c = Cluster(snapshot)
    try:
        return {h.job.id: h for h in c.held}, {d.id: d.free for d in c.devices.values()}
    finally:
        c.close()


def test_an_equal_copy_of_a_running_job_reuses_its_hold_and_a_changed_one_gets_a_new_hold():
    n = node("n1", gpus=4, first_id=0)
    a = running(1, "alpha", gpu_ids(n, 2))
    b = running(2, "beta", gpu_ids(n, 1, 2), share=0.5, gpu_fraction=0.5)
    first = snap([n], [a, b])
    before, _ = holds(first)
    # As the live cycle reads them: new objects, equal in every field; b has moved to another device.
    moved = replace(b, placements=tuple(replace(p, gpu_id=3) for p in b.placements))
    after, free = holds(replace(first, jobs=(replace(a), moved)))
    assert after[1] is before[1]
    assert after[2] is not before[2] and set(after[2].shares) == {3}
    assert free == {0: 0.0, 1: 0.0, 2: 1.0, 3: 0.5}


def test_a_job_that_changed_any_field_is_not_mistaken_for_its_old_self():
    n = node("n1", gpus=2, first_id=0)
    a = running(1, "alpha", gpu_ids(n, 1), priority=100)
    first = snap([n], [a])
    before, _ = holds(first)
    after, _ = holds(replace(first, jobs=(replace(a, terminating=True),)))
    assert after[1] is not before[1] and after[1].job.terminating


def test_decisions_over_equal_copies_are_those_of_a_cluster_built_from_scratch():
    n1, n2 = node("n1", gpus=4, first_id=0), node("n2", gpus=4, first_id=10)
    jobs = [running(1, "beta", gpu_ids(n1, 4), priority=100, started_at=0.0),
            running(2, "beta", gpu_ids(n2, 2), priority=100, started_at=0.0),
            JobInfo(3, "alpha", gpus=4, priority=500, submitted_at=1.0)]
    s = snap([n1, n2], jobs, [quota("alpha", guaranteed=4, limit=8), quota("beta", guaranteed=2, limit=8)],
             now=5000.0)
    first = schedule(s)
    assert first.preemptions  # alpha reclaims its guarantee from beta's borrowed GPUs
    copies = replace(s, jobs=tuple(replace(j) for j in s.jobs))
    assert schedule(copies) == first
    cluster_module.REUSE_STATIC = False
    try:
        assert schedule(copies) == first
    finally:
        cluster_module.REUSE_STATIC = True
