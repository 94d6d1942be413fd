"""Placement: filters (pool, model, memory, labels, driver, health), scoring (binpack, spread), GPU sharing,
MIG slices, and Unsatisfiable reasons that name the failing constraint."""

from scheduler.core import check_invariants, schedule
from scheduler.core import reasons as R
from scheduler.core.types import JobInfo
from tests.core.builders import by_id, gpu_ids, node, quota, running, snap, team

H100 = "h100-80gb"


def test_it_spreads_inference_replicas_over_the_emptiest_nodes():
    n1, n2 = node("n1", first_id=0), node("n2", first_id=100)
    jobs = [running(1, "vision", gpu_ids(n1, 2)), JobInfo(2, "vision", gpus=1, kind="inference"),
            JobInfo(3, "vision", gpus=1, submitted_at=1)]
    d = schedule(snap([n1, n2], jobs, [quota("vision")]))
    placed = {s.job_id: s.placements[0].gpu_id for s in d.starts}
    assert placed[2] == 100  # the empty node
    assert placed[3] == 2  # training packs next to the running job


def test_it_keeps_teams_to_their_pools():
    a = node("a1", pool="research", first_id=0)
    b = node("b1", pool="prod", first_id=100)
    teams = [team("vision", pools={"prod"})]
    s = snap([a, b], [JobInfo(1, "vision", gpus=1), JobInfo(2, "vision", gpus=1, pool="research")],
             [quota("vision")], teams)
    d = schedule(s)
    started, pending = by_id(d)
    assert [p.gpu_id for p in d.starts[0].placements] == [100]
    assert pending[2].reason.code == R.NO_MATCHING_POOL
    assert check_invariants(s, d) == []


def test_it_says_no_matching_gpu_model_for_a_model_absent_from_the_pools():
    d = schedule(snap([node("n1", first_id=0)], [JobInfo(1, "vision", gpu_models=("b200",))], [quota("vision")]))
    assert d.pending[0].reason.code == R.NO_MATCHING_GPU_MODEL


def test_it_names_gpu_memory_when_no_device_is_large_enough():
    a = node("a1", model="a100-40gb", first_id=0)
    d = schedule(snap([a], [JobInfo(1, "vision", gpu_memory_mb=80000)], [quota("vision", model="a100-40gb")]))
    reason = d.pending[0].reason
    assert reason.code == R.UNSATISFIABLE
    assert reason.details["constraint"] == "gpu_memory"
    assert "80000 MiB" in reason.message


def test_it_matches_node_labels_and_compares_driver_versions_numerically():
    old = node("n1", first_id=0, labels={"network": "ib"}, driver_version="535.9.1")
    new = node("n2", first_id=100, labels={"network": "ib"}, driver_version="535.10.0")
    eth = node("n3", first_id=200, labels={"network": "eth"}, driver_version="550.1")
    jobs = [JobInfo(1, "vision", gpus=8, node_labels={"network": "ib"}, min_driver_version="535.10")]
    s = snap([old, new, eth], jobs, [quota("vision")])
    d = schedule(s)
    assert {p.gpu_id for p in d.starts[0].placements} == set(range(100, 108))
    assert check_invariants(s, d) == []


def test_it_names_the_label_or_driver_that_no_node_has():
    n1 = node("n1", first_id=0, labels={"network": "eth"}, driver_version="535.1")
    d = schedule(snap([n1], [JobInfo(1, "v", node_labels={"network": "ib"})], [quota("v")]))
    assert d.pending[0].reason.details["constraint"] == "node_labels"
    d = schedule(snap([n1], [JobInfo(1, "v", min_driver_version="550")], [quota("v")]))
    assert d.pending[0].reason.details["constraint"] == "driver_version"


def test_it_packs_gpu_fractions_onto_shared_devices_without_overcommitting():
    n1 = node("n1", first_id=0, gpus=2)
    jobs = [running(1, "vision", (0,), share=0.5, gpu_fraction=0.5, gpus=1),
            JobInfo(2, "vision", gpu_fraction=0.25, submitted_at=1),
            JobInfo(3, "vision", gpu_fraction=0.5, submitted_at=2),
            JobInfo(4, "vision", gpu_fraction=0.5, submitted_at=3)]
    s = snap([n1], jobs, [quota("vision")])
    d = schedule(s)
    placed = {st.job_id: (st.placements[0].gpu_id, st.placements[0].share) for st in d.starts}
    assert placed == {2: (0, 0.25), 3: (1, 0.5), 4: (1, 0.5)}
    assert check_invariants(s, d) == []


def test_a_fraction_that_fits_no_device_says_the_largest_free_share():
    n1 = node("n1", first_id=0, gpus=2)
    jobs = [running(1, "vision", (0,), share=0.3, gpu_fraction=0.3, gpus=1),
            running(2, "vision", (1,), share=0.8, gpu_fraction=0.8, gpus=1),
            JobInfo(3, "vision", gpu_fraction=0.75)]
    d = schedule(snap([n1], jobs, [quota("vision")]))
    reason = d.pending[0].reason
    assert reason.code == R.RESOURCES and reason.details["largest_free_share"] == 0.7
    assert "needs 0.75 of one GPU of h100-80gb" in reason.message
    assert reason.message.endswith("the largest free share of a device is 0.7")


def test_it_schedules_mig_slices_as_their_own_model():
    mig = node("m1", model="a100-1g.10gb", gpus=7, first_id=0)
    s = snap([mig], [JobInfo(1, "vision", gpu_models=("a100-1g.10gb",))], [quota("vision", model="a100-1g.10gb")])
    d = schedule(s)
    assert d.starts[0].placements[0].gpu_id == 0
    assert check_invariants(s, d) == []


def test_a_job_for_any_model_gets_whole_gpus_never_a_mig_slice():
    """A team with quota for whole A100s and for 1g.10gb slices (which sort first by name)."""
    mig = node("m1", model="a100-1g.10gb", gpus=7, first_id=0, mig=True)
    whole = node("w1", model="a100-40gb", gpus=1, first_id=100)
    quotas = [quota("vision", model="a100-1g.10gb"), quota("vision", model="a100-40gb")]
    jobs = [JobInfo(1, "vision", submitted_at=1), JobInfo(2, "vision", submitted_at=2),
            JobInfo(3, "vision", gpu_models=("a100-1g.10gb",), submitted_at=3)]
    s = snap([mig, whole], jobs, quotas, policy="fifo")
    d = schedule(s)
    placed = {st.job_id: st.placements[0].gpu_id for st in d.starts}
    assert placed == {1: 100, 3: 0}  # job 2 waits for a whole A100 though six slices are idle
    assert by_id(d)[1][2].reason.code == R.RESOURCES and "a100-40gb" in by_id(d)[1][2].reason.message
    assert check_invariants(s, d) == []


def test_it_checks_host_cpus_and_memory():
    n1 = node("n1", first_id=0, cpus=16, memory_mb=64000)
    n2 = node("n2", first_id=100, cpus=64, memory_mb=512000)
    jobs = [JobInfo(1, "vision", gpus=1, cpus=32), JobInfo(2, "vision", gpus=1, cpus=128, submitted_at=1)]
    d = schedule(snap([n1, n2], jobs, [quota("vision")]))
    started, pending = by_id(d)
    assert d.starts[0].placements[0].gpu_id == 100
    assert pending[2].reason.details["constraint"] == "host_resources"



def test_a_team_allowed_no_pool_gets_nothing_even_when_gpus_are_idle():
    """Tenancy fails closed: an empty pool set means no pool, not every pool."""
    s = snap([node("n1", first_id=0)], [JobInfo(1, "outsiders", gpus=1)],
             [quota("outsiders", guaranteed=4, limit=4)], [team("outsiders", pools=())])
    d = schedule(s)
    assert not d.starts
    assert d.pending[0].reason.code == R.NO_MATCHING_POOL
    assert check_invariants(s, d) == []


def test_a_fractions_memory_request_is_what_its_share_of_the_device_holds():
    small = node("a1", model="a100-40gb", gpus=1, first_id=0)
    big = node("h1", model="h100-80gb", gpus=1, first_id=10)
    job = JobInfo(1, "vision", gpu_fraction=0.25, gpu_memory_mb=20_000)  # 0.25 x 40 GiB = 10 GiB: too small
    d = schedule(snap([small], [job], [quota("vision", model="a100-40gb")]))
    assert d.pending[0].reason.code == R.UNSATISFIABLE
    assert "20000 MiB in a 0.25 share" in d.pending[0].reason.message
    d = schedule(snap([small, big], [job], [quota("vision", model="a100-40gb"), quota("vision")]))
    assert [p.gpu_id for p in d.starts[0].placements] == [10]  # 0.25 x 80 GiB = 20 GiB fits
    d = schedule(snap([small], [JobInfo(1, "vision", gpu_fraction=0.5, gpu_memory_mb=20_000)],
                      [quota("vision", model="a100-40gb")]))
    assert [p.gpu_id for p in d.starts[0].placements] == [0]  # 0.5 x 40 GiB = 20 GiB fits
