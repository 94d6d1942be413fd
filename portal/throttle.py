"""Throttles: what django-axes counts failed logins under, the per-person limit on quotes, and each node's
calls per minute."""

import time

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.cache import cache
from rest_framework.throttling import BaseThrottle, UserRateThrottle

USERNAME_MAX = get_user_model()._meta.get_field("username").max_length  # 150


def axes_username(request, credentials: dict | None = None) -> str | None:
    """The username a login tried, cut to the longest a username can be: a longer one names no account, and
    axes stores it in a 255-character column (a 256-character name at the login form was a 500)."""
    if credentials:
        value = credentials.get("username")
    else:
        value = getattr(request, "data", request.POST).get("username")
    return value[:USERNAME_MAX] if isinstance(value, str) else value


class QuoteThrottle(UserRateThrottle):
    """Quotes per person, API and submit form together (``DEFAULT_THROTTLE_RATES["quote"]``): each one reads
    the whole cluster and runs a scheduling cycle (about 0.6 s of the web server's CPU with 10,000 jobs
    waiting), so a script quoting in a loop could take a web worker for itself. The form asks once a change,
    300 ms after the last one; a person at the form stays far below the limit."""

    scope = "quote"

    def refusal(self, wait: float | None = None) -> str:
        """What a person past the limit is told (``wait``: seconds until the next quote, else this throttle's)."""
        wait = self.wait() if wait is None else wait
        return f"too many quotes: at most {self.rate}; try again in {max(1, round(wait or 1))} s"


class NodeThrottle(BaseThrottle):
    """A node's calls to the node API (heartbeats, long-polls, reports), at most ``ROTA_NODE_REQUESTS_PER_MIN`` in
    each minute of the clock, against a node gone wild; past it the node is answered 429 with ``Retry-After`` the
    seconds to the next minute (and the agent waits that long). Counted with one round trip to the cache a call
    (``portal.cache.RedisCache.count``): DRF's ``ScopedRateThrottle`` kept the time of each of the node's calls in
    the last minute, read and wrote the whole list back at every call, two round trips on every heartbeat and
    report. A minute's calls are counted together, so a node may make up to twice the rate across the turn of a
    minute; the bound is against a runaway, not a quota."""

    WINDOW_S = 60

    def __init__(self) -> None:
        self.wait_s = float(self.WINDOW_S)

    def allow_request(self, request, view) -> bool:
        node = getattr(request.user, "node", None)
        if node is None:  # not a node: refused by the view's permission, not here
            return True
        now = time.time()
        window = int(now // self.WINDOW_S)
        self.wait_s = self.WINDOW_S - now % self.WINDOW_S
        return _count(f"throttle:node:{node.pk}:{window}", 2 * self.WINDOW_S) <= settings.ROTA_NODE_REQUESTS_PER_MIN

    def wait(self) -> float:
        return self.wait_s


def _count(key: str, ttl_s: int) -> int:
    """One more at ``key`` in the cache, and the count: one round trip with the portal's Redis cache, two with
    another (the development server's memory)."""
    if hasattr(cache, "count"):
        return cache.count(key, ttl_s)
    cache.add(key, 0, ttl_s)
    return cache.incr(key)
