"""A node's calls a minute (``portal.throttle.NodeThrottle``): past ``ROTA_NODE_REQUESTS_PER_MIN`` a node is answered
429 with ``Retry-After`` the seconds to the next minute, other nodes are not, and each call is counted with one
round trip to the portal's Redis cache (``portal.cache.RedisCache.count``)."""

import time

import pytest
import redis
from django.core.cache import cache

from portal.cache import RedisCache

pytestmark = pytest.mark.django_db
REDIS_CACHE = {"default": {"BACKEND": "portal.cache.RedisCache", "LOCATION": None, "KEY_PREFIX": "rota-test"}}


@pytest.fixture(params=["redis", "memory"])
def node_cache(request, settings):
    """The production settings' cache (Redis), and the development server's (in memory)."""
    if request.param == "redis":
        settings.CACHES = {"default": {**REDIS_CACHE["default"], "LOCATION": settings.REDIS_URL}}
    cache.clear()
    yield request.param
    cache.clear()


def _wait(client):
    return client.post("/api/v1/node/wait/", {"timeout_s": 0.01}, format="json")


def test_a_node_past_its_calls_a_minute_is_answered_429_and_other_nodes_are_not(node_cache, cluster, node_client,
                                                                                settings):
    settings.ROTA_NODE_REQUESTS_PER_MIN = 3
    busy, other = node_client(cluster["nodes"][0]), node_client(cluster["nodes"][1])
    if time.time() % 60 > 55:  # the count starts again at the turn of the minute: begin inside one
        time.sleep(60 - time.time() % 60 + 0.1)
    assert [_wait(busy).status_code for _ in range(3)] == [200, 200, 200]
    refused = _wait(busy)
    assert refused.status_code == 429
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert "throttled" in refused.json()["detail"].lower()
    assert _wait(other).status_code == 200


def test_the_portals_cache_counts_in_one_round_trip_and_expires_the_count(settings):
    """INCR with EXPIRE NX in one pipeline: the first count sets the expiry, later ones leave it."""
    counter = RedisCache(settings.REDIS_URL, {"KEY_PREFIX": "rota-test-count"})
    client = redis.Redis.from_url(settings.REDIS_URL)
    key = counter.make_and_validate_key("calls")
    client.delete(key)
    assert [counter.count("calls", 120) for _ in range(3)] == [1, 2, 3]
    assert 110 < client.ttl(key) <= 120
    client.expire(key, 50)
    assert counter.count("calls", 120) == 4 and client.ttl(key) <= 50  # not pushed back by a later count
    client.delete(key)


def test_a_node_call_is_one_counter_in_the_cache_not_a_history(cluster, node_client, settings):
    """DRF's throttle kept a list of the node's call times, read and written back whole at every call."""
    settings.CACHES = {"default": {**REDIS_CACHE["default"], "LOCATION": settings.REDIS_URL}}
    cache.clear()
    client = redis.Redis.from_url(settings.REDIS_URL)
    node = node_client(cluster["nodes"][0])
    assert [_wait(node).status_code for _ in range(2)] == [200, 200]
    keys = [k.decode() for k in client.keys("rota-test:*")]
    assert len(keys) == 1 and ":throttle:node:" in keys[0], keys
    assert int(client.get(keys[0])) == 2 and 0 < client.ttl(keys[0]) <= 120
    cache.clear()
