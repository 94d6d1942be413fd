"""The priority plugin: queue order, LAS ranks, and who may preempt."""

from dataclasses import replace

import pytest

from scheduler.core import reasons as R
from scheduler.core import schedule
from scheduler.core.plugins import priority
from scheduler.core.policies import PRESETS
from scheduler.core.types import JobInfo, PriorityClassInfo
from tests.core.builders import CLASSES, gpu_ids, node, quota, running, snap


def _queue(s):
    return [j.id for j in sorted(s.jobs, key=priority.order(s))]


def test_it_orders_by_priority_then_arrival_then_id():
    jobs = [JobInfo(1, "a", priority=100, submitted_at=5), JobInfo(2, "a", priority=500, submitted_at=9),
            JobInfo(3, "a", priority=100, submitted_at=1), JobInfo(4, "a", priority=100, submitted_at=1)]
    assert _queue(snap([], jobs, policy="fifo")) == [2, 3, 4, 1]


def test_it_orders_least_attained_service_first_inside_a_priority():
    jobs = [JobInfo(1, "a", attained_gpu_s=900.0, submitted_at=1), JobInfo(2, "a", attained_gpu_s=10.0, submitted_at=2)]
    policy = replace(PRESETS["tiresias"], las_thresholds_gpu_s=())
    assert _queue(snap([], jobs, policy=policy)) == [2, 1]


def test_it_refuses_an_unknown_ordering():
    with pytest.raises(ValueError, match="unknown ordering 'random'"):
        priority.order(snap([], [], policy=replace(PRESETS["rota"], ordering="random")))


def test_ranked_turns_service_levels_into_ranks_below_priority():
    policy = replace(PRESETS["tiresias"], las_thresholds_gpu_s=(100.0, 1000.0))
    jobs = [JobInfo(1, "a", priority=10, attained_gpu_s=5000.0), JobInfo(2, "a", priority=10, attained_gpu_s=0.0),
            JobInfo(3, "a", priority=9, attained_gpu_s=0.0)]
    ranks = {j.id: j.priority for j in priority.ranked(snap([], jobs, policy=policy)).jobs}
    assert ranks[2] > ranks[1] > ranks[3]  # a level never lifts a job above a higher priority
    assert priority.las_level(5000.0, (100.0, 1000.0)) == 2


def test_may_preempt_needs_the_job_and_its_class_to_allow_it():
    classes = {c.name: c for c in CLASSES} | {"polite": PriorityClassInfo("polite", 700, may_preempt=False)}
    assert priority.may_preempt(JobInfo(1, "a", priority_class="interactive"), classes)
    assert not priority.may_preempt(JobInfo(1, "a", priority_class="polite"), classes)
    assert not priority.may_preempt(JobInfo(1, "a", priority_class="interactive", may_preempt=False), classes)


def test_a_preemption_by_priority_names_the_priority_plugin_and_the_priorities():
    n = node("n1", gpus=2, first_id=0)
    low = running(1, "a", gpu_ids(n, 2), priority=100, priority_class="best-effort")
    high = JobInfo(2, "a", gpus=2, priority=800, priority_class="interactive")
    d = schedule(snap([n], [low, high], [quota("a", guaranteed=2, limit=2)]))
    (pre,) = d.preemptions
    assert pre.reason == "Priority" and "(priority 800 > 100; priority plugin)" in pre.message
    (info,) = d.pending
    assert info.reason.code == R.PREEMPTING and info.reason.details["plugin"] == "priority"
