"""The Redis cache the production settings use (``CACHES``): Django's, keeping its Redis client.

Django's ``RedisCacheClient`` makes a new ``redis.Redis`` for every cache call (``get_client``), and building one
fills its table of ~170 response callbacks: about 0.15 ms of CPU, twice in every node request then (the throttle's
read and write of DRF's ``ScopedRateThrottle``'s history), 4,285 heartbeats, ~4,500 long-poll checks and 4,664
event batches in a full-size ``make load``. A client is only a connection pool and that table: one per pool serves
every call (each thread has its own cache object, and redis-py's clients are thread-safe anyway). ``count`` is the
node throttle's counter (``portal.throttle.NodeThrottle``): one round trip a call."""

from django.core.cache.backends import redis as django_redis


class RedisCacheClient(django_redis.RedisCacheClient):
    """Django's, with one ``redis.Redis`` per connection pool instead of one per call."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._clients: dict = {}  # connection pool -> its client

    def get_client(self, key=None, *, write=False):
        pool = self._get_connection_pool(write)
        client = self._clients.get(pool)
        if client is None:
            client = self._clients[pool] = self._client(connection_pool=pool)
        return client


class RedisCache(django_redis.RedisCache):
    """Django's Redis cache on ``RedisCacheClient``."""

    def __init__(self, server, params) -> None:
        super().__init__(server, params)
        self._class = RedisCacheClient

    def count(self, key: str, ttl_s: int) -> int:
        """Add one to the counter at ``key`` (made at 0, to expire ``ttl_s`` seconds after its first count) and
        return it: one round trip to Redis (INCR, and EXPIRE where the key had no expiry), where Django's ``incr``
        takes two and refuses a missing key."""
        key = self.make_and_validate_key(key)
        with self._cache.get_client(key, write=True).pipeline(transaction=False) as pipe:
            pipe.incr(key)
            pipe.expire(key, ttl_s, nx=True)
            return pipe.execute()[0]
