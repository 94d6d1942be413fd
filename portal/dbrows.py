"""Reading many rows: timestamps read fast, and several reads that must agree read as of one moment.

Django reads every ``timestamptz`` through its own loader, a Python subclass of psycopg's: about 6 µs a value,
because psycopg's C loader is used only for its own class. A month of allocations (64k rows, 128k timestamps)
took 0.8 s to read that way, against 0.08 s with the C loader. When the session's time zone is UTC and Django
reads datetimes as UTC (``USE_TZ`` with the default database time zone), the C loader gives the very same
values, so reads that fetch many rows can ask for it, per cursor (Django's connection-wide loader, which its
cursors check, stays as it is).
"""

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC

from django.conf import settings
from django.core.exceptions import EmptyResultSet, ImproperlyConfigured
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
    """A query that requests run all the time, its SQL compiled by the ORM once per process (and database) instead
    of at each run: Django compiles a queryset anew every time, about 0.4 ms of CPU for a node token's lookup, 1 ms
    for a heartbeat's assignments and 1.5 ms for a page of the job list's fifty columns, more than PostgreSQL spends
    answering them. ``build(**markers)`` makes the queryset with a marker where each run puts its own value
    (``rows(**values)``); everything else it holds is fixed. A marker is either

    - a value no real one takes (a number out of range, say): it must be one parameter the query holds as it is
      (not a list), and each run's value takes its place; or
    - ``SUBQUERY``: each run gives a ``QuerySet`` (which rows: the caller's tenancy, filters, the page), compiled by
      the ORM at that run, whose SQL and parameters take the marker's place. The query is compiled with a text
      marker there, so the SQL must hold no literal ``%`` (each ``%s`` is then one parameter, in order).

    The SQL of a run is what the ORM would compile for the whole (``tests/portal/test_dbrows.py``,
    ``tests/scheduler/test_node_request_rows.py``). Rows are read as by ``fetch_rows``."""

    SUBQUERY = object()
    _MARK = "rota_compiled_subquery_"

    def __init__(self, build: Callable[..., QuerySet], **markers: object) -> None:
        self._build, self._markers = build, markers
        # per database alias: the SQL's pieces between the subqueries, the subqueries' names, each piece's parameters
        self._compiled: dict[str, tuple[list[str], list[str], list[list[tuple[str | None, object]]]]] = {}

    def _compile(self, using: str) -> tuple[list[str], list[str], list[list[tuple[str | None, object]]]]:
        subqueries = sorted(name for name, marker in self._markers.items() if marker is self.SUBQUERY)
        scalars = {name: marker for name, marker in self._markers.items() if marker is not self.SUBQUERY}
        given = {**scalars, **{name: RawSQL(self._MARK + name, ()) for name in subqueries}}
        sql, params = self._build(**given).using(using).query.sql_with_params()
        split = re.split(self._MARK + r"(\w+)", sql)
        texts, names = split[0::2], split[1::2]
        if sorted(names) != subqueries or (names and "%%" in sql):
            raise ImproperlyConfigured(f"each subquery marker must be in the query once, and no literal %: {sql}")
        pieces, taken = [], 0
        for text in texts:
            count = text.count("%s") if names else len(params)
            pieces.append([(next((name for name, marker in scalars.items() if param == marker), None), param)
                           for param in params[taken:taken + count]])
            taken += count
        found = sorted(name for piece in pieces for name, _ in piece if name)
        if taken != len(params) or found != sorted(scalars):
            raise ImproperlyConfigured(f"each value marker must be one parameter of the query: {params!r}")
        return texts, names, pieces

    def sql_params(self, using: str = DEFAULT_DB_ALIAS, **values: object) -> tuple[str, list]:
        """The SQL and its parameters of one run, ``values`` in the markers' places (raises ``EmptyResultSet``, as
        the ORM does, when a subquery can match nothing)."""
        compiled = self._compiled.get(using)
        if compiled is None:  # two threads may both compile it: the same answer
            compiled = self._compiled[using] = self._compile(using)
        texts, names, pieces = compiled
        sql, params = [texts[0]], [values[name] if name else fixed for name, fixed in pieces[0]]
        for name, text, piece in zip(names, texts[1:], pieces[1:], strict=True):
            inner, inner_params = values[name].query.sql_with_params()  # type: ignore[attr-defined]
            sql += [inner, text]
            params += [*inner_params, *(values[n] if n else fixed for n, fixed in piece)]
        return "".join(sql), params

    def rows(self, using: str = DEFAULT_DB_ALIAS, **values: object) -> list[tuple]:
        """The rows of one run with ``values``; none when a subquery can match nothing."""
        try:
            sql, params = self.sql_params(using, **values)
        except EmptyResultSet:
            return []
        return _fetch(connections[using], sql, params)


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
