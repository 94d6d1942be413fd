"""The quota plugin: fits (limits, guarantee, borrowing), within-guarantee, and borrowing plans."""

from dataclasses import replace

from scheduler.core import reasons as R
from scheduler.core import schedule
from scheduler.core.plugins import quota as quota_plugin
from scheduler.core.policies import PRESETS
from scheduler.core.session import Session
from scheduler.core.types import JobInfo, Placement
from tests.core.builders import gpu_ids, node, quota, running, snap

H100 = "h100-80gb"


def _session(jobs, quotas, policy="rota"):
    n = node("n1", gpus=8, first_id=0)
    return Session(snap([n], jobs, quotas, policy=policy)), n


def test_fits_admits_within_the_limit_and_refuses_past_it_with_the_numbers():
    s, _n = _session([], [quota("a", guaranteed=2, limit=4)])
    group = s.cluster.groups[("train", H100)]
    assert quota_plugin.fits(s, JobInfo(1, "a", gpus=4), group, 4.0) is None
    reason = quota_plugin.fits(s, JobInfo(2, "a", gpus=5), group, 5.0)
    assert reason.code == R.QUOTA_EXCEEDED and reason.details["plugin"] == "quota"
    assert reason.details["limit"] == 4 and reason.details["requested"] == 5


def test_fits_follows_charges_made_through_the_statement():
    s, n = _session([], [quota("a", guaranteed=2, limit=4)])
    group = s.cluster.groups[("train", H100)]
    job = JobInfo(1, "a", gpus=1)
    assert quota_plugin.fits(s, job, group, 1.0) is None
    s.statement.start(JobInfo(9, "a", gpus=4), group, tuple(Placement(i) for i in gpu_ids(n, 4)), 4.0, None)
    assert quota_plugin.fits(s, job, group, 1.0).code == R.QUOTA_EXCEEDED


def test_a_team_without_borrowing_stops_at_its_guarantee():
    n = node("n1", gpus=8, first_id=0)
    s = Session(snap([n], [], [quota("a", guaranteed=2, limit=8)], policy=replace(PRESETS["rota"], borrowing=False)))
    group = s.cluster.groups[("train", H100)]
    assert quota_plugin.fits(s, JobInfo(1, "a", gpus=2), group, 2.0) is None
    reason = quota_plugin.fits(s, JobInfo(2, "a", gpus=3), group, 3.0)
    assert reason.code == R.QUOTA_EXCEEDED and "borrowing off" in reason.message and reason.details["limit"] == 2


def test_within_guarantee_is_per_look_and_moves_with_charges():
    n = node("n1", gpus=8, first_id=0)
    held = running(1, "a", gpu_ids(n, 2))
    s = Session(snap([n], [held], [quota("a", guaranteed=3, limit=8)]))
    look = s.look_of(JobInfo(2, "a", gpus=1))
    assert quota_plugin.within_guarantee(s, look)
    look2 = s.look_of(JobInfo(3, "a", gpus=2))
    assert not quota_plugin.within_guarantee(s, look2)


def test_borrowers_split_idle_capacity_by_weight():
    n = node("n1", gpus=8, first_id=0)
    jobs = [JobInfo(1, "a", gpus=8), JobInfo(2, "b", gpus=8)]
    s = Session(snap([n], jobs, [quota("a", guaranteed=0, limit=8, weight=3.0),
                                 quota("b", guaranteed=0, limit=8, weight=1.0)]))
    quota_plugin.plan_borrowing(s, [s.look_of(j) for j in jobs])
    assert s.quota.borrow_cap[("a", H100)] == 6.0 and s.quota.borrow_cap[("b", H100)] == 2.0


def test_a_reclaim_names_the_quota_plugin_and_the_borrowed_gpus():
    n = node("n1", gpus=4, first_id=0)
    jobs = [running(1, "b", gpu_ids(n, 4), priority=100, started_at=0.0), JobInfo(2, "a", gpus=4, priority=100)]
    d = schedule(snap([n], jobs, [quota("a", guaranteed=4, limit=4), quota("b", guaranteed=0, limit=4)],
                      now=5000.0))
    (pre,) = d.preemptions
    assert pre.reason == "Reclaim" and "borrows 4 above its guarantee" in pre.message
    assert "(quota plugin: team a holds 0 of its 4 guaranteed and needs 4)" in pre.message
    (info,) = d.pending
    assert info.reason.details["plugin"] == "quota"
