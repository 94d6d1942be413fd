"""The portal's PostgreSQL backend (``portal/postgres``): a kept connection is checked before a request's first
query without a round trip, and one the server ended is still found, and replaced."""

import os
import select
import subprocess
import sys

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


def _named_tenant_query(wrapper):
    from portal.models import Team
    with wrapper.cursor() as cursor:  # the ORM's compiled SQL, run on ``wrapper`` as a request would
        sql, params = Team.objects.filter(name="rota-binding-test").values_list("id").query.sql_with_params()
        cursor.execute(sql, params)
        return cursor.fetchall()


def test_parameters_are_bound_by_the_server(kept):
    """PostgreSQL sees the statement with its placeholders, not with the values spliced into its text."""
    _named_tenant_query(kept)
    assert "$1" in _last_query(kept) and "rota-binding-test" not in _last_query(kept)


def test_a_statement_run_often_is_prepared_once_on_its_connection(kept):
    threshold = kept.settings_dict["OPTIONS"]["prepare_threshold"]
    for _ in range(threshold + 1):
        _named_tenant_query(kept)
    with kept.cursor() as cursor:  # the session's own view: prepared statements belong to one connection
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [row[0] for row in cursor.fetchall()]
    assert [text for text in prepared if "$1" in text and "portal_team" in text]


def test_preparing_can_be_turned_off_for_a_pooler():
    """Behind PgBouncer before 1.21 (or without ``max_prepared_statements``) a prepared statement would be lost with
    the server connection it was made on: ``ROTA_DB_PREPARE_THRESHOLD=0`` prepares none; binding stays."""
    def options(**env):
        result = subprocess.run(
            [sys.executable, "-c", "import django; django.setup(); from django.conf import settings; "
                                   "o = settings.DATABASES['default']['OPTIONS']; "
                                   "print(o['server_side_binding'], o['prepare_threshold'])"],
            env={**{k: v for k, v in os.environ.items() if k != "ROTA_DB_PREPARE_THRESHOLD"},
                 "DJANGO_SETTINGS_MODULE": "portal.settings", **env},
            capture_output=True, text=True, check=False)
        assert result.returncode == 0, result.stderr
        return result.stdout.split()
    assert options() == ["True", "5"]
    assert options(ROTA_DB_PREPARE_THRESHOLD="0") == ["True", "None"]
    assert options(ROTA_DB_PREPARE_THRESHOLD="20") == ["True", "20"]


def test_a_submits_insert_is_converted_once_for_the_connections_that_run_it(alice, monkeypatch):
    """A job's INSERT (55 parameters, over psycopg's own 50) keeps its placeholders' conversion from one submit to
    the next: psycopg takes its uncached path for none of a submit's statements."""
    from psycopg import _queries

    from scheduler.services.jobs import job_submit

    uncached, convert = [], _queries._query2pg_nocache

    def converted_anew(query, encoding):
        uncached.append(query)
        return convert(query, encoding)

    monkeypatch.setattr(_queries, "_query2pg_nocache", converted_anew)
    hits = _queries._query2pg.cache_info().hits
    for name in ("first", "second"):
        job_submit(user=alice, name=name, command="true", gpu_model="h100-80gb")
    assert not uncached, uncached
    assert _queries._query2pg.cache_info().hits > hits
