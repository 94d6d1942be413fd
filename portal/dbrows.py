"""Reading many rows: timestamps read fast, and several reads that must agree read as of one moment.

Django reads every ``timestamptz`` through its own loader, a Python subclass of psycopg's: about 6 µs a value,
because psycopg's C loader is used only for its own class. A month of allocations (64k rows, 128k timestamps)
took 0.8 s to read that way, against 0.08 s with the C loader. When the session's time zone is UTC and Django
reads datetimes as UTC (``USE_TZ`` with the default database time zone), the C loader gives the very same
values, so reads that fetch many rows can ask for it, per cursor (Django's connection-wide loader, which its
cursors check, stays as it is).
"""

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC

from django.conf import settings
from django.core.exceptions import EmptyResultSet
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.models import QuerySet


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
    with db.cursor() as cursor:
        fast_timestamps(cursor)
        cursor.execute(sql, params)
        return cursor.fetchall()


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


class ModelRows:
    """Instances of ``model`` built from its columns in a row that a query run by hand returned, as the ORM builds
    them: ``names`` (lookups from the row's model, ``prefix`` ``node__`` for a related one) are its concrete
    fields in order, for ``values_list``; each value goes through its field's database converters (a JSON
    field's text is parsed). For a query whose SQL is compiled once per process and run by every request
    (``scheduler.api.node.NodeTokenAuthentication``): the ORM would compile it each time."""

    def __init__(self, model, prefix: str = "", start: int = 0) -> None:
        self.model = model
        self.fields = model._meta.concrete_fields
        self.names = [prefix + field.name for field in self.fields]
        self.attnames = [field.attname for field in self.fields]
        self.start, self.end = start, start + len(self.fields)
        self._converters: list[tuple[int, object, list]] | None = None

    def build(self, row: tuple, using: str = DEFAULT_DB_ALIAS):
        """The instance of the row's columns ``start`` to ``end``."""
        db = connections[using]
        if self._converters is None:  # as the compiler finds them (SQLCompiler.get_converters), once
            found = []
            for i, field in enumerate(self.fields):
                column = field.get_col(self.model._meta.db_table)
                found_here = db.ops.get_db_converters(column) + column.get_db_converters(db)
                if found_here:
                    found.append((i, column, found_here))
            self._converters = found
        values = list(row[self.start:self.end])
        for i, column, converters in self._converters:
            for convert in converters:
                values[i] = convert(values[i], column, db)
        return self.model.from_db(using, self.attnames, values)
