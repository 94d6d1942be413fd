"""Celery's Redis transport (portal/broker.py): publishes reuse the channel's Redis client instead of building
one each (with its ~170 response callbacks), and still reach the queue a worker reads."""

import redis
from django.conf import settings

from portal.celery import app
from scheduler.tasks import run_cycle


def test_publishes_reuse_one_redis_client_and_reach_the_queue(monkeypatch):
    broker = redis.Redis.from_url(settings.REDIS_URL)
    broker.delete("celery")
    run_cycle.apply_async(kwargs={"wanted": True})  # warm: the producer's connection and channel
    made = []
    init = redis.Redis.__init__
    monkeypatch.setattr(redis.Redis, "__init__", lambda client, *a, **kw: made.append(1) or init(client, *a, **kw))
    for _ in range(5):
        run_cycle.apply_async(kwargs={"wanted": True})
    assert made == []
    assert broker.llen("celery") == 6
    assert app.connection_for_write().transport_cls == "portal.broker:Transport"
    broker.delete("celery")
