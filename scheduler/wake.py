"""Wake-ups through Redis: "a cycle is wanted" and "node N has news". Hints only (DESIGN.md, principle 2):
PostgreSQL stays the truth, the periodic cycle and the nodes' heartbeats stay the safety net, and every
function here shrugs off a Redis that is down (logged) or absent (the file broker of ``make dev``).

The wake-ups a transaction asks for on commit (a submit's cycle, a cancel's node news) are sent by the process's
sender thread (``scheduler.wake_sender``), so a request answers without waiting for Redis or the broker; one lost
with a dying process is covered by the same safety nets.

Each hint is a Redis list of at most one item, so any number of wake-ups before the reader looks coalesce
into one, and one made while nobody waits is still there when the reader comes (until it expires).

- The cycle: a wake-up sets ``CYCLE_WANTED`` before it enqueues the Celery task; the cycle takes it
  (``cycle_claim``) once it holds the single-flight lock, before it reads anything. A task that finds the lock
  held returns at once; the cycle that held it looks at the flag after its commit and asks again
  (``scheduler.tasks``), so a submit made while a cycle runs never waits for the periodic one. A woken cycle
  first rests after the last one as long as that one took (``ROTA_CYCLE_REST_PCT`` of it, ``cycle_rest``): on
  an idle cluster a few milliseconds; under a busy node's exits, one cycle answers several of them.
- Nodes: the cycle (starts, stops) and a cancel push ``node_notify`` on commit; a node agent long-polls
  ``POST /api/v1/node/wait/``, which returns as soon as its list has an item, and then sends its heartbeat,
  whose answer says what to run. The wait is ``node_wait`` in a web thread (gthread, runserver, the test
  client) or ``node_wait_async`` on the ASGI server's event loop (``make serve``: ``portal/longpoll.py``); both
  bound it with ``node_wait_timeout`` and answer ``node_wait_answer``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import weakref
from collections.abc import Callable, Iterable

import redis
import redis.asyncio
from django.conf import settings

log = logging.getLogger(__name__)

CYCLE_WANTED = "rota:cycle:wanted"
CYCLE_REST = "rota:cycle:rest"
MAX_CYCLE_REST_S = 1.0  # whatever a cycle took, a woken one never waits longer
NODE_NEWS = "rota:node:{}:news"
NEWS_TTL_S = 120  # a node that never asks again leaves no key behind
# The long-polls' Redis connections are named (CLIENT SETNAME), so CLIENT LIST tells the waits a web thread
# holds (``node_wait``) from those held on an event loop (``node_wait_async``) and from anything else.
WAIT_CLIENT_NAME = "rota-node-wait-thread"
LOOP_WAIT_CLIENT_NAME = "rota-node-wait-loop"


@functools.cache
def _client() -> redis.Redis | None:
    """One client (a thread-safe connection pool) per process; None without Redis (the file broker). A Redis that
    stops answering fails a call after ``socket_timeout`` (logged) rather than hold its caller for ever."""
    url = _redis_url()
    return None if url is None else redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=5,
                                                         health_check_interval=30)


@functools.cache
def _wait_client() -> redis.Redis | None:
    """The long-poll's client (``node_wait``): without a socket timeout, since BLPOP's own ends the read; redis-py's
    default of 5 s would cut a longer wait short and send the node to poll at its interval."""
    url = _redis_url()
    return None if url is None else redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=None,
                                                         health_check_interval=30, client_name=WAIT_CLIENT_NAME)


def _redis_url() -> str | None:
    """Redis's URL, None without Redis (``make dev``'s file broker)."""
    url = settings.REDIS_URL
    return url if url.startswith(("redis://", "rediss://", "unix://")) else None


def _push(*keys: str, ttl_s: int | None = None) -> bool:
    """Raise each flag of ``keys`` (a list holding at most one item), all in one round trip to Redis; whether
    the first flag was down before (True also when that cannot be known)."""
    client = _client()
    if client is None or not keys:
        return True
    try:
        with client.pipeline(transaction=True) as pipe:
            for key in keys:
                pipe.rpush(key, 1)
                pipe.ltrim(key, 0, 0)
                if ttl_s:
                    pipe.expire(key, ttl_s)
            return pipe.execute()[0] == 1
    except redis.RedisError as exc:
        log.warning("wake-up %s not sent (Redis: %s); the periodic cycle and heartbeats cover it",
                    ", ".join(keys[:3]) + (" ..." if len(keys) > 3 else ""), exc)
        return True


def cycle_request() -> bool:
    """Say a cycle is wanted (the caller then enqueues the task). False when it was wanted already: a wake-up
    is outstanding, and the cycle that takes the flag reads everything committed before this."""
    return _push(CYCLE_WANTED)


def cycle_claim() -> None:
    """The cycle holds the lock and is about to read: the wake-ups so far are answered by this cycle."""
    client = _client()
    if client is None:
        return
    try:
        client.delete(CYCLE_WANTED)
    except redis.RedisError as exc:
        log.warning("cycle wake-up flag not cleared (Redis: %s)", exc)


def cycle_requested() -> bool:
    """Whether a wake-up came since the last ``cycle_claim`` (True when it cannot be known: run rather than miss)."""
    client = _client()
    if client is None:
        return True
    try:
        return bool(client.exists(CYCLE_WANTED))
    except redis.RedisError:
        return True


def cycle_rest(seconds: float) -> None:
    """A cycle just ran: a woken cycle waits until ``seconds`` have passed (``cycle_rest_left``), so the wake-ups
    of that time (a busy node's exits, a burst of submits) are answered by one cycle instead of one each."""
    client = _client()
    milliseconds = int(min(seconds, MAX_CYCLE_REST_S) * 1000)
    if client is None or milliseconds < 1:
        return
    try:
        client.set(CYCLE_REST, 1, px=milliseconds)
    except redis.RedisError as exc:
        log.warning("cycle rest not recorded (Redis: %s)", exc)


def cycle_rest_left() -> float:
    """Seconds a woken cycle should still wait (0 when none, or when it cannot be known)."""
    client = _client()
    if client is None:
        return 0.0
    try:
        return max(client.pttl(CYCLE_REST), 0) / 1000
    except redis.RedisError:
        return 0.0


def nodes_notify(node_ids: Iterable[int]) -> None:
    """Tell these nodes, once the current transaction commits, that their assignments changed."""
    keys = [NODE_NEWS.format(pk) for pk in set(node_ids)]
    if keys and _client() is not None:
        from scheduler import wake_sender

        wake_sender.send_on_commit(node_keys=tuple(keys))  # one round trip for all, off the request's thread


def holders_notify(job_ids: Iterable[int]) -> None:
    """Tell the nodes where these jobs hold GPUs (they were asked to stop), once the transaction commits."""
    from scheduler.models import Allocation

    job_ids = list(job_ids)
    if job_ids and _client() is not None:
        nodes_notify(Allocation.objects.filter(job_id__in=job_ids, ended_at__isnull=True)
                     .values_list("node_id", flat=True).distinct())


def node_wait_timeout(asked_s: float | None, interval_s: float) -> float:
    """How long to hold a long-poll that asked for ``asked_s`` seconds (None: as long as allowed): at most the
    node's heartbeat interval (``scheduler.services.node_cadence``), so a node whose news was lost still hears
    from the portal as often as it would by polling."""
    return float(interval_s) if asked_s is None else min(asked_s, float(interval_s))


def node_wait_answer(news: bool | None, deliver: Callable[[], dict | None] | None = None) -> dict:
    """The long-poll's answer for what ``node_wait`` returned: ``waited`` False when it could not wait (no
    Redis, Redis failed, no waiting slot left); the node then polls at its heartbeat interval instead. With
    news and ``deliver`` (the node asked for its assignments: ``scheduler.services.nodes.node_delivery``), what
    it returns too; when it returns None or fails, news alone: the node heartbeats for them."""
    answer = {"news": bool(news), "waited": news is not None}
    if news and deliver is not None:
        try:
            answer.update(deliver() or {})
        except Exception:  # the database failed or refused: the heartbeat that news alone brings retries it
            log.exception("a long-poll's delivery failed; the node will heartbeat for its assignments")
    return answer


def can_wait() -> bool:
    """Whether ``node_wait`` can block (there is a Redis to wait on)."""
    return _client() is not None


def node_wait(node_id: int, timeout_s: float) -> bool | None:
    """Block until node ``node_id`` has news or ``timeout_s`` passes; True when it had news (taken now), None
    when it could not wait (no Redis, or Redis failed)."""
    client = _wait_client()
    if client is None:
        return None
    key = NODE_NEWS.format(node_id)
    try:
        if timeout_s <= 0:  # BLPOP's 0 would mean "for ever"
            return client.lpop(key) is not None
        # BLPOP takes a float timeout; the socket must outlast it (this client's sockets have no read timeout).
        return client.blpop([key], timeout=timeout_s) is not None
    except redis.RedisError as exc:
        log.warning("node %s long-poll ended early (Redis: %s)", node_id, exc)
        return None


# One asyncio client per event loop (a uvicorn worker runs one; tests may start several, one after the other).
_async_clients: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _async_client(max_connections: int) -> redis.asyncio.Redis | None:
    """The running loop's client, made on first use; each held wait takes one of its connections."""
    loop = asyncio.get_running_loop()
    if loop not in _async_clients:
        url = _redis_url()
        _async_clients[loop] = None if url is None else redis.asyncio.Redis.from_url(
            url, socket_connect_timeout=2, socket_timeout=None,  # as _wait_client's: BLPOP's own timeout ends a read
            health_check_interval=30, max_connections=max_connections, client_name=LOOP_WAIT_CLIENT_NAME)
    return _async_clients[loop]


async def node_wait_async(node_id: int, timeout_s: float, *, max_connections: int) -> bool | None:
    """``node_wait`` on the event loop: True when node ``node_id`` had news (taken now), False after
    ``timeout_s`` without, None when it could not wait. Cancelled (the node hung up), the client closes the
    connection it was blocked on rather than return it to the pool with a reply still owed."""
    client = _async_client(max_connections)
    if client is None:
        return None
    key = NODE_NEWS.format(node_id)
    try:
        if timeout_s <= 0:  # BLPOP's 0 would mean "for ever"
            return await client.lpop(key) is not None
        async with asyncio.timeout(timeout_s + 10):  # Redis answers at timeout_s; this only bounds a hung server
            return await client.blpop([key], timeout=timeout_s) is not None
    except (redis.RedisError, TimeoutError) as exc:
        log.warning("node %s long-poll ended early (Redis: %s)", node_id, exc or "no answer")
        return None
