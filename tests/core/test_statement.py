"""The statement: the only writer of a session's tentative state; commit keeps, discard undoes exactly."""

from scheduler.core.session import Session
from scheduler.core.timeline import Reservation
from scheduler.core.types import JobInfo, Placement, Preemption
from tests.core.builders import gpu_ids, node, quota, running, snap

H100 = "h100-80gb"


def _world():
    a, b = node("a", gpus=4, first_id=0, cpus=64, memory_mb=512_000), node("b", gpus=4, first_id=10)
    victim = running(1, "b", gpu_ids(b, 2), priority=100, started_at=0.0)
    s = Session(snap([a, b], [victim], [quota("t", guaranteed=4, limit=8), quota("b", guaranteed=0, limit=8)],
                     now=5000.0))
    return s, s.cluster.groups[("train", H100)], a, b


def _state(s, group):
    c, q, st = s.cluster, s.quota, s.statement
    return (
        {d.id: d.free for d in c.devices.values()},
        {n.name: (n.cpus_free, n.mem_free) for n in c.node_by_order},
        [list(b) for b in group.buckets], dict(group.count), list(group.partial),
        {k: v for k, v in q.used.items() if v}, {k: v for k, v in q.leaving.items() if v},
        {k: v for k, v in q.non_preemptible.items() if v}, dict(s.free_of_model), dict(s.stopping),
        list(st.starts), list(st.preemptions), set(st.victims), list(st.waiting), dict(st.preempting_eta),
        dict(st.reservations), dict(st.reserved_nodes), dict(st.blocked_by),
    )


def _do_everything(s, group, a, b):
    st = s.statement
    job = JobInfo(2, "t", gpus=2, cpus=8, memory_mb=1000, preemptible=False)
    st.start(job, group, tuple(Placement(i) for i in gpu_ids(a, 2)), 2.0, None)
    st.start(JobInfo(3, "t", gpus=1, gpu_fraction=0.5), group, (Placement(gpu_ids(a, 1, 2)[0], 0.5),), 0.5, 100.0)
    rec = s.running_by_team[("b", H100)][0]
    st.evict(rec, H100, Preemption(1, 4, "Reclaim", "reclaim"))
    st.hold(JobInfo(4, "t", gpus=3), group, s.request(JobInfo(4, "t", gpus=3)), (Placement(12),), 5120.0)
    st.reserve(("train", H100), Reservation(5, 6000.0, {1: 1.0}))
    st.block(("pool", "other"), 6)
    st.wait(JobInfo(7, "t"), None)
    st.wait_alike([JobInfo(8, "t"), JobInfo(9, "t")], (None, None, None))


def test_discard_undoes_every_operation_since_the_last_commit():
    s, group, a, b = _world()
    before = _state(s, group)
    _do_everything(s, group, a, b)
    assert _state(s, group) != before
    s.statement.discard()
    assert _state(s, group) == before


def test_commit_keeps_what_was_done_and_discard_then_undoes_only_what_followed():
    s, group, a, b = _world()
    st = s.statement
    st.start(JobInfo(2, "t", gpus=2), group, tuple(Placement(i) for i in gpu_ids(a, 2)), 2.0, None)
    st.commit()
    kept = _state(s, group)
    st.start(JobInfo(3, "t", gpus=2), group, tuple(Placement(i) for i in gpu_ids(a, 2, 2)), 2.0, None)
    st.discard()
    assert _state(s, group) == kept
    assert [x.job_id for x in st.starts] == [2] and s.quota.team_used("t", H100) == 2.0


def test_a_start_charges_quota_takes_devices_and_reports_what_it_borrows():
    s, group, a, _b = _world()
    s.statement.start(JobInfo(2, "t", gpus=4), group, tuple(Placement(i) for i in gpu_ids(a, 4)), 4.0, None)
    s.statement.start(JobInfo(3, "t", gpus=1), group, (Placement(10 + 3),), 1.0, None)
    first, second = s.statement.starts
    assert first.borrowed == 0 and second.borrowed == 1  # 5 held against a guarantee of 4
    assert all(s.cluster.devices[i].free == 0.0 for i in gpu_ids(a, 4))
