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
from django.core.exceptions import EmptyResultSet, ImproperlyConfigured
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


class CompiledQuery:
    """A query that requests run all the time, its SQL compiled by the ORM once per process instead of at each
    run (Django compiles a queryset anew every time: about 0.4 ms of CPU for a node token's lookup and 1 ms for
    a heartbeat's assignments, more than PostgreSQL spends answering them). ``build(**markers)`` makes the
    queryset with a marker value where each run puts its own (``rows(**values)``); every other value it holds
    is part of the query. A marker must stand for one value (not a list) that the query holds as it is."""

    def __init__(self, build: Callable[..., QuerySet], **markers: object) -> None:
        self._build, self._markers = build, markers
        self._compiled: tuple[str, list[tuple[str | None, object]]] | None = None

    def sql_params(self, **values: object) -> tuple[str, list]:
        """The SQL and its parameters, ``values`` in the markers' places."""
        if self._compiled is None:  # two threads may both compile it: the same answer
            sql, params = self._build(**self._markers).query.sql_with_params()
            slots = [(next((name for name, marker in self._markers.items() if param == marker), None), param)
                     for param in params]
            if sorted(name for name, _ in slots if name) != sorted(self._markers):
                raise ImproperlyConfigured(f"each marker must be one parameter of the query: {params!r}")
            self._compiled = (sql, slots)
        sql, slots = self._compiled
        return sql, [values[name] if name else fixed for name, fixed in slots]

    def rows(self, using: str = DEFAULT_DB_ALIAS, **values: object) -> list[tuple]:
        """The rows of one run with ``values``."""
        sql, params = self.sql_params(**values)
        with connections[using].cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall()


class ModelRows:
    """Instances of ``model`` built from its columns in a row of a query run by hand (``CompiledQuery``), as the
    ORM builds them: ``names`` (lookups from the query's model, under ``prefix``: ``node__`` for a related one)
    are ``fields`` (default: every concrete one; the others are deferred) in the model's order, for
    ``values_list``; each value goes through its field's database converters (a JSON field's text is parsed).
    A row whose primary key is null (an outer join that found nothing) is no instance: None."""

    def __init__(self, model, fields: tuple[str, ...] | None = None, prefix: str = "", start: int = 0) -> None:
        self.model = model
        concrete = model._meta.concrete_fields  # in their order, as Model.from_db takes them
        self.fields = [field for field in concrete if field.name in fields] if fields else list(concrete)
        if fields and len(self.fields) != len(fields):
            raise ImproperlyConfigured(f"not concrete fields of {model.__name__}: {sorted(fields)}")
        self.names = [prefix + field.name for field in self.fields]
        self.attnames = [field.attname for field in self.fields]
        self.start, self.end = start, start + len(self.fields)
        self._pk = self.fields.index(model._meta.pk)
        self._converters: list[tuple[int, object, list]] | None = None

    def build(self, row: tuple, using: str = DEFAULT_DB_ALIAS):
        """The instance of the row's columns ``start`` to ``end``, or None."""
        if row[self.start + self._pk] is None:
            return None
        db = connections[using]
        if self._converters is None:  # as the compiler finds them (SQLCompiler.get_converters), once
            found = []
            for i, field in enumerate(self.fields):
                column = field.get_col(self.model._meta.db_table)
                here = db.ops.get_db_converters(column) + column.get_db_converters(db)
                if here:
                    found.append((i, column, here))
            self._converters = found
        values = list(row[self.start:self.end])
        for i, column, converters in self._converters:
            for convert in converters:
                values[i] = convert(values[i], column, db)
        return self.model.from_db(using, self.attnames, values)
