"""The portal's PostgreSQL backend: Django's, with a check of a kept connection that costs no round trip.

Every web thread and worker keeps its connection between requests (``CONN_MAX_AGE``), checked before its first
use in each request (``CONN_HEALTH_CHECKS``: ``portal/settings_production.py``), so a server that restarted costs
a reconnection, not a failed request. Django checks by running ``SELECT 1``: a round trip, and a query for
PostgreSQL to run, before every request's own, on every request of every web server.

A connection the server ended (a restart, ``pg_terminate_backend``, ``idle_session_timeout``, a crash that took
the backend) has had its goodbye sent and its socket closed by the server, and that is already on this side: the
idle socket is readable. So an idle connection whose socket has nothing to read is used as it is; one that has
something is checked as Django does (what arrived may also be a notice, which the check reads). A server that
vanished without a word (its host gone) is not found by either way before the request's own query: Django's
check would wait on that ``SELECT 1`` as long."""

import select

from django.db.backends.postgresql import base


class DatabaseWrapper(base.DatabaseWrapper):
    def is_usable(self) -> bool:
        connection = self.connection
        if connection is None or connection.closed or connection.broken:
            return False
        if not _readable(connection.fileno()):
            return True  # idle and nothing from the server since its last answer: as usable as when it gave it
        return super().is_usable()


def _readable(fd: int) -> bool:
    """Whether socket ``fd`` has something to read (or its end closed) now, without waiting."""
    poll = select.poll()
    poll.register(fd, select.POLLIN | select.POLLPRI)
    return bool(poll.poll(0))
