"""The fair-share plugin: entitlements and usage factors that order teams inside a priority."""

from scheduler.core.plugins import fairshare, priority
from scheduler.core.types import JobInfo
from tests.core.builders import quota, snap


def test_entitlement_is_the_guarantee_else_the_weight():
    s = snap([], [], [quota("a", guaranteed=4), quota("a", model="a100-40gb", guaranteed=2),
                      quota("b", guaranteed=0, weight=3.0)])
    assert fairshare.entitlements(s) == {"a": 6.0, "b": 3.0}


def test_factor_is_usage_over_entitlement_and_usage_without_entitlement_sorts_last():
    s = snap([], [], [quota("a", guaranteed=4), quota("b", guaranteed=2)], usage={"a": 400.0, "b": 400.0, "c": 1.0})
    f = fairshare.fair_share_factors(s)
    assert f["a"] == 100.0 and f["b"] == 200.0 and f["c"] > f["b"]


def test_the_team_further_below_its_share_goes_first():
    jobs = [JobInfo(1, "a", submitted_at=1), JobInfo(2, "b", submitted_at=2)]
    s = snap([], jobs, [quota("a", guaranteed=4), quota("b", guaranteed=4)], usage={"a": 900.0, "b": 100.0})
    assert [j.id for j in sorted(s.jobs, key=priority.order(s))] == [2, 1]
