"""The engine places a job only on pools whose image allow-list admits its image (``JobInfo.image_pools``,
which the snapshot builder fills from scheduler.images), and says ImageNotAllowed when none does."""

from scheduler.core import reasons as R
from scheduler.core.engine import schedule
from scheduler.core.types import JobInfo
from tests.core.builders import by_id, node, quota, snap, team

TRAIN, RESEARCH = node("t1", gpus=4, pool="train"), node("r1", gpus=4, pool="research")
QUOTAS = [quota("vision", guaranteed=8, limit=8)]


def job(image_pools, **kw) -> JobInfo:
    return JobInfo(id=1, team="vision", gpus=2, gpu_models=("h100-80gb",), image="registry.example.com/v/train:1",
                   image_pools=None if image_pools is None else frozenset(image_pools), **kw)


def placed_nodes(decisions) -> set[str]:
    return {("t1" if p.gpu_id in {g.id for g in TRAIN.gpus} else "r1") for s in decisions.starts for p in s.placements}


def test_it_places_a_job_only_in_a_pool_that_allows_its_image():
    decisions = schedule(snap([TRAIN, RESEARCH], [job({"research"})], QUOTAS))
    assert placed_nodes(decisions) == {"r1"}


def test_it_keeps_a_job_whose_image_no_usable_pool_allows_pending_with_image_not_allowed():
    teams = [team("vision", pools={"train"})]
    _started, pending = by_id(schedule(snap([TRAIN, RESEARCH], [job({"research"})], QUOTAS, teams=teams)))
    reason = pending[1].reason
    assert reason.code == R.IMAGE_NOT_ALLOWED and reason.code in R.PERMANENT_CODES
    assert reason.message.startswith("image registry.example.com/v/train:1 is not allowed in pool(s) train")
    assert reason.details == {"image": "registry.example.com/v/train:1", "pools": ["train"], "plugin": "placement"}


def test_a_job_that_names_a_pool_its_image_is_not_allowed_in_waits_with_image_not_allowed():
    _started, pending = by_id(schedule(snap([TRAIN, RESEARCH], [job({"research"}, pool="train")], QUOTAS)))
    assert pending[1].reason.code == R.IMAGE_NOT_ALLOWED


def test_without_an_image_rule_every_pool_may_hold_the_job():
    started, _pending = by_id(schedule(snap([TRAIN], [job(None)], QUOTAS)))
    assert started == {1}


def test_jobs_alike_but_for_their_images_pools_are_judged_apart():
    jobs = [job({"research"}), JobInfo(id=2, team="vision", gpus=2, gpu_models=("h100-80gb",), image="x/y:1",
                                       image_pools=frozenset({"elsewhere"}))]
    started, pending = by_id(schedule(snap([TRAIN, RESEARCH], jobs, QUOTAS)))
    assert started == {1} and pending[2].reason.code == R.IMAGE_NOT_ALLOWED
