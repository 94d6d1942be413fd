"""The kinds plugin: an inference service is spread out; other kinds pack unless the policy spreads."""

from dataclasses import replace

from scheduler.core import schedule
from scheduler.core.plugins import kinds
from scheduler.core.policies import PRESETS
from scheduler.core.types import JobInfo
from tests.core.builders import gpu_ids, node, quota, running, snap


def test_inference_spreads_and_the_spread_policy_spreads_everything():
    assert kinds.spreads(PRESETS["rota"], JobInfo(1, "t", kind="inference"))
    assert not kinds.spreads(PRESETS["rota"], JobInfo(1, "t", kind="training"))
    assert kinds.spreads(replace(PRESETS["rota"], placement="spread"), JobInfo(1, "t", kind="training"))


def test_an_inference_job_lands_on_the_emptiest_node():
    a, b = node("a", gpus=4, first_id=0), node("b", gpus=4, first_id=10)
    jobs = [running(1, "t", gpu_ids(a, 2)), JobInfo(2, "t", gpus=1, kind="inference"), JobInfo(3, "t", gpus=1)]
    d = schedule(snap([a, b], jobs, [quota("t", guaranteed=8, limit=8)]))
    where = {s.job_id: s.placements[0].gpu_id // 10 for s in d.starts}
    assert where == {2: 1, 3: 0}
