"""The portal's PostgreSQL backend (``portal/postgres``): a kept connection is checked before a request's first
query without a round trip, and one the server ended is still found, and replaced."""

import select

import pytest
from django.db import connection, connections

pytestmark = pytest.mark.django_db


@pytest.fixture
def kept():
    """A second connection to the test database, as a web thread keeps one between requests."""
    wrapper = connections.create_connection("default")
    wrapper.ensure_connection()
    yield wrapper
    wrapper.close()


def _last_query(wrapper) -> str:
    """What PostgreSQL says ``wrapper``'s session ran last (asked from the test's own connection)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT query FROM pg_stat_activity WHERE pid = %s", [wrapper.connection.info.backend_pid])
        return cursor.fetchone()[0]


def _until_readable(wrapper, timeout_s: float = 10.0) -> None:
    poll = select.poll()
    poll.register(wrapper.connection.fileno(), select.POLLIN)
    assert poll.poll(timeout_s * 1000), "the server's message never reached the socket"


def test_the_portal_runs_its_own_backend():
    assert type(connections["default"]).__module__ == "portal.postgres.base"


def test_a_kept_connection_is_checked_without_a_query(kept):
    kept.connection.execute("SELECT 'rota: the last query'")
    assert kept.is_usable()
    assert _last_query(kept) == "SELECT 'rota: the last query'"  # Django's own check would have run SELECT 1


def test_a_connection_the_server_ended_is_found_and_replaced(kept):
    ended = kept.connection.info.backend_pid
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [ended])
        assert cursor.fetchone()[0]
    _until_readable(kept)
    assert not kept.is_usable()
    kept.health_check_enabled, kept.health_check_done = True, False  # as at a request's start
    kept.close_if_health_check_failed()
    assert kept.connection is None
    with kept.cursor() as cursor:  # the request's own query, on a fresh connection
        cursor.execute("SELECT pg_backend_pid()")
        assert cursor.fetchone()[0] != ended


def test_a_live_connection_with_something_to_read_is_asked_and_kept(kept):
    """A notification (or a notice) that arrived while the connection was idle makes the socket readable: the
    check then asks the server, as Django does, and the connection stays."""
    kept.connection.execute("LISTEN rota_backend_test")
    notifier = connections.create_connection("default")  # autocommit: the notification goes out at once
    try:
        with notifier.cursor() as cursor:
            cursor.execute("SELECT pg_notify('rota_backend_test', 'x')")
    finally:
        notifier.close()
    _until_readable(kept)
    assert kept.is_usable()
    assert _last_query(kept) == "SELECT 1"
