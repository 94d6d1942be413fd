"""A woken cycle rests after the last one as long as that one took (``ROTA_CYCLE_REST_PCT`` of it): exits and
submits arriving meanwhile are answered together, so a node turning over short jobs costs a cycle per several
jobs rather than one each, and the cycle never takes more than about half of a core. Beat's periodic cycle never
rests; an idle cluster's cycle (a few ms) hardly does."""

import pytest
import redis
from django.conf import settings as django_settings

from scheduler import tasks, wake
from scheduler.services.jobs import job_submit

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_rest():
    client = redis.Redis.from_url(django_settings.REDIS_URL)
    client.delete(wake.CYCLE_WANTED, wake.CYCLE_REST, "celery")
    yield
    client.delete(wake.CYCLE_WANTED, wake.CYCLE_REST, "celery")


def test_a_cycle_that_ran_asks_the_next_woken_one_to_rest_as_long_as_it_took(alice, settings):
    settings.ROTA_CYCLE_REST_PCT = 100
    job_submit(user=alice, name="j", command="true", gpu_model="h100-80gb")
    report = tasks.run_cycle()
    assert report["ran"] and report["started"] == 1
    took = sum(report["phases_ms"].values()) / 1000
    assert 0 < wake.cycle_rest_left() <= took


def test_half_the_rest_and_none(alice, settings):
    settings.ROTA_CYCLE_REST_PCT = 0
    assert tasks.run_cycle()["ran"]
    assert wake.cycle_rest_left() == 0
    wake.cycle_rest(0.4 * 50 / 100)
    assert 0.1 < wake.cycle_rest_left() <= 0.2


def test_a_rest_is_never_longer_than_its_cap():
    wake.cycle_rest(60)
    assert wake.cycle_rest_left() <= wake.MAX_CYCLE_REST_S
