"""Reading many rows: timestamps read fast, and several reads that must agree read as of one moment.

Django reads every ``timestamptz`` through its own loader, a Python subclass of psycopg's: about 6 µs a value,
because psycopg's C loader is used only for its own class. A month of allocations (64k rows, 128k timestamps)
took 0.8 s to read that way, against 0.08 s with the C loader. When the session's time zone is UTC and Django
reads datetimes as UTC (``USE_TZ`` with the default database time zone), the C loader gives the very same
values, so reads that fetch many rows can ask for it, per cursor (Django's connection-wide loader, which its
cursors check, stays as it is).
"""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC

from django.conf import settings
from django.core.exceptions import EmptyResultSet
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.models import QuerySet
from django.db.models.expressions import RawSQL


def fast_timestamps(cursor) -> None:
    """Let Django's ``cursor`` read ``timestamptz`` values with psycopg's C loader when that gives what Django's
    own loader gives (PostgreSQL, ``USE_TZ``, UTC on both sides); otherwise leave it as it is."""
    db = cursor.db
    if db.vendor != "postgresql" or not settings.USE_TZ or db.timezone != UTC:
        return
    raw = cursor.cursor
    if raw.connection.info.parameter_status("TimeZone") != "UTC":
        return
    from psycopg.types.datetime import TimestamptzLoader

    # Registering psycopg's own class installs its C version, where psycopg has one.
    raw.adapters.register_loader("timestamptz", TimestamptzLoader)


def fetch_rows(qs: QuerySet) -> list[tuple]:
    """The rows of a ``values_list`` queryset as tuples, timestamps read fast (``fast_timestamps``). Only for
    fields whose database values are what the ORM gives (numbers, text, timestamps); off PostgreSQL it is
    ``list(qs)``."""
    db = connections[qs.db]
    if db.vendor != "postgresql":
        return [tuple(row) for row in qs]
    try:
        sql, params = qs.query.sql_with_params()
    except EmptyResultSet:  # e.g. ``__in`` an empty list: nothing can match
        return []
    return _fetch(db, sql, params)


def _fetch(db, sql: str, params) -> list[tuple]:
    with db.cursor() as cursor:
        fast_timestamps(cursor)
        cursor.execute(sql, params)
        return cursor.fetchall()


class CompiledOnce:
    """A ``values_list`` read whose wide, fixed part is compiled once per process and whose ``pk__in``
    subquery (which rows: the caller's tenancy and filters, the page) is compiled by the ORM at each call.

    Compiling a query of some fifty columns and five joins took the ORM 1.5 ms of CPU, more than PostgreSQL
    took to run it, at every request of the job list. ``build(ids)`` gives the fixed query with ``pk__in=ids``;
    it is compiled with a marker standing for the subquery, which each call's subquery then replaces: the SQL
    the ORM would have compiled for the whole (``tests/portal/test_dbrows.py``). Rows are read as by
    ``fetch_rows`` (PostgreSQL only)."""

    MARK = "rota_compiled_once_subquery"

    def __init__(self, build: Callable[[RawSQL], QuerySet]):
        self.build = build
        self._compiled: dict[str, tuple] = {}  # per database alias: SQL and parameters before and after the marker

    def sql_with_params(self, ids: QuerySet) -> tuple[str, tuple]:
        """The whole query's SQL and parameters for the subquery ``ids`` (raises ``EmptyResultSet`` as the
        ORM does when it can match nothing)."""
        compiled = self._compiled.get(ids.db)
        if compiled is None:  # two threads may both compile it: harmless, they compile the same
            sql, params = self.build(RawSQL(self.MARK, ())).using(ids.db).query.sql_with_params()
            if "%%" in sql or sql.count(self.MARK) != 1:  # then each "%s" is one parameter, in order
                raise ValueError(f"CompiledOnce: the marker must be there once, and no literal %: {sql}")
            before, after = sql.split(self.MARK)
            split = before.count("%s")
            compiled = self._compiled[ids.db] = (before, after, tuple(params[:split]), tuple(params[split:]))
        before, after, params_before, params_after = compiled
        inner, params = ids.query.sql_with_params()
        return before + inner + after, (*params_before, *params, *params_after)

    def rows(self, ids: QuerySet) -> list[tuple]:
        """The rows for the subquery ``ids``; none when it can match nothing."""
        try:
            sql, params = self.sql_with_params(ids)
        except EmptyResultSet:
            return []
        return _fetch(connections[ids.db], sql, params)


@contextmanager
def one_snapshot(using: str = DEFAULT_DB_ALIAS) -> Iterator[None]:
    """Run the reads inside against one snapshot of the database (PostgreSQL's REPEATABLE READ, read only).

    Under autocommit each query sees a newer state than the last: a watermark read, then the rows it
    promises, could straddle a change that moves both. Inside a caller's transaction (tests, a task's own
    transaction) that transaction's view is used as it is; other databases read as they are."""
    db = connections[using]
    if db.in_atomic_block or db.vendor != "postgresql":
        yield
        return
    with transaction.atomic(using=using):
        with db.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        yield
