"""Queue order: priority, then fair share (decayed usage / entitlement), least attained service, or FIFO."""

from dataclasses import replace

import pytest

from scheduler.core import schedule
from scheduler.core.plugins.priority import las_level, ranked
from scheduler.core.policies import PRESETS
from scheduler.core.types import JobInfo
from tests.core.builders import node, quota, snap

N1 = node("n1", first_id=0, gpus=1)


def _first(s):
    d = schedule(s)
    return d.starts[0].job_id if d.starts else None


def test_it_favours_the_team_that_used_less_of_its_share():
    jobs = [JobInfo(1, "heavy", submitted_at=1), JobInfo(2, "light", submitted_at=2)]
    qs = [quota("heavy", guaranteed=4), quota("light", guaranteed=4)]
    assert _first(snap([N1], jobs, qs, usage={"heavy": 9000.0, "light": 100.0})) == 2
    assert _first(snap([N1], jobs, qs, usage={"heavy": 100.0, "light": 9000.0})) == 1


def test_it_weighs_usage_by_entitlement():
    jobs = [JobInfo(1, "big", submitted_at=1), JobInfo(2, "small", submitted_at=2)]
    qs = [quota("big", guaranteed=8), quota("small", guaranteed=1)]
    # big used 4000 of 8 (500 per GPU), small used 1000 of 1 (1000 per GPU): big goes first.
    assert _first(snap([N1], jobs, qs, usage={"big": 4000.0, "small": 1000.0})) == 1


def test_it_never_lets_fair_share_override_priority():
    jobs = [JobInfo(1, "heavy", priority=800, submitted_at=5), JobInfo(2, "light", priority=100, submitted_at=1)]
    qs = [quota("heavy"), quota("light")]
    assert _first(snap([N1], jobs, qs, usage={"heavy": 1e9})) == 1


def test_it_runs_least_attained_service_first_under_las():
    jobs = [JobInfo(1, "a", attained_gpu_s=5000, submitted_at=1), JobInfo(2, "a", attained_gpu_s=10, submitted_at=2)]
    assert _first(snap([N1], jobs, [quota("a")], policy="tiresias")) == 2


def test_it_runs_the_oldest_first_under_fifo():
    jobs = [JobInfo(2, "a", submitted_at=2), JobInfo(1, "a", submitted_at=1)]
    assert _first(snap([N1], jobs, [quota("a")], policy="fifo")) == 1


def test_las_levels_keep_arrival_order_within_a_level():
    # Both under the first threshold (1 GPU-hour): the earlier arrival goes first despite more service.
    jobs = [JobInfo(1, "a", attained_gpu_s=3000, submitted_at=1), JobInfo(2, "a", attained_gpu_s=10, submitted_at=2)]
    assert _first(snap([N1], jobs, [quota("a")], policy="tiresias")) == 1
    assert [las_level(x, (3600.0, 36000.0)) for x in (0, 3599, 3600, 36000, 1e9)] == [0, 0, 1, 2, 2]
    s = snap([N1], jobs, [quota("a")], policy="tiresias")
    assert [j.priority for j in ranked(s).jobs] == [2, 2]  # priority 0 x 3 levels + (2 - level 0)
    with pytest.raises(ValueError, match="ascend"):
        ranked(replace(s, policy=replace(PRESETS["tiresias"], las_thresholds_gpu_s=(10.0, 1.0))))
