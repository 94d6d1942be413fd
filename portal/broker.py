"""Celery's Redis transport, with one Redis client per channel instead of one per call.

kombu's Redis channel builds a new ``redis.Redis`` for every command it sends outside the consumer's own
connection (``Channel._create_client``, through ``conn_or_acquire``): each publish paid for a client's ~170
response callbacks, about a fifth of a Celery message's CPU (bench/README.md). The client is only a view of
the channel's connection pool, and thread-safe: this channel keeps one per pool (a new pool after a fork or a
reconnect gets a new client). The message format and everything else are kombu's.
"""

from kombu.transport import redis as kombu_redis


class Channel(kombu_redis.Channel):
    _sync_client = None

    def _create_client(self, asynchronous=False):
        if asynchronous:
            return super()._create_client(asynchronous=True)
        pool, client = self.pool, self._sync_client
        if client is None or client.connection_pool is not pool:
            client = self._sync_client = super()._create_client()
        return client


class Transport(kombu_redis.Transport):
    Channel = Channel
