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
check would wait on that ``SELECT 1`` as long.

And psycopg keeps its conversion of a statement's ``%s`` placeholders to PostgreSQL's ``$1`` for statements of up
to ``STATEMENT_PARAMS_KEPT`` parameters, not its own 50: a job's INSERT has 55, and converting it anew (a
regular expression over the statement) took 57 us of each submit's ~2 ms (py-spy put it at a tenth of the users'
server's interpreter time under load). Its cache stays bounded (the 128 statements used last), so bulk INSERTs
of varying rows only take their turn in it."""

import select

from django.db.backends.postgresql import base
from psycopg import _queries

STATEMENT_PARAMS_KEPT = 200
_queries.MAX_CACHED_STATEMENT_PARAMS = max(_queries.MAX_CACHED_STATEMENT_PARAMS, STATEMENT_PARAMS_KEPT)


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
