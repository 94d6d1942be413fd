"""``portal.dbrows``: many timestamps read with psycopg's C loader give exactly what the ORM gives; a query
compiled once with its subquery compiled per call reads what the ORM reads."""

from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from psycopg.pq import Format

from portal.dbrows import CompiledQuery, fast_timestamps, fetch_rows
from scheduler.models import Allocation, Gpu
from tests.accounting.helpers import allocate, make_job

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 11, 2, 9, 0, 0, 123457, tzinfo=UTC)


def loader(cursor):
    oid = cursor.cursor.adapters.types["timestamptz"].oid
    return cursor.cursor.adapters.get_loader(oid, Format.TEXT)


@pytest.fixture
def allocations(alice, cluster):
    job = make_job(alice, cluster["vision"])
    for k, gpu in enumerate(Gpu.objects.order_by("uuid")[:4]):
        allocate(job, gpu, T0 + timedelta(hours=k, microseconds=k), None if k == 3 else T0 + timedelta(days=1 + k))


def test_the_rows_are_the_ones_the_orm_reads_to_the_microsecond_and_time_zone(allocations):
    qs = Allocation.objects.order_by("pk").values_list("gpu__uuid", "started_at", "ended_at", "share_milli")
    rows = fetch_rows(qs)
    assert rows == [tuple(r) for r in qs]
    assert all(r[1].tzinfo is UTC for r in rows) and rows[0][1] == T0 and rows[3][2] is None


def test_the_cursor_reads_timestamps_with_psycopgs_own_loader_only_when_it_gives_utc(allocations):
    with connection.cursor() as cursor:
        before = loader(cursor)
        fast_timestamps(cursor)
        fast = loader(cursor)
    assert "django" in before.__module__ and "django" not in fast.__module__
    assert fast.__name__ == "TimestamptzLoader"
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL TIME ZONE 'Europe/Paris'")
        fast_timestamps(cursor)  # the C loader would answer in Paris time: Django's stays
        assert "django" in loader(cursor).__module__


def test_nothing_can_match_an_empty_list(allocations):
    assert fetch_rows(Allocation.objects.filter(job_id__in=[]).values_list("pk")) == []


def _wide(ids):  # parameters on both sides of the subquery: a literal before, a filter after
    from django.db.models import Value

    return (Allocation.objects.annotate(tag=Value("x")).filter(pk__in=ids, share_milli__gte=1).order_by("-pk")
            .values_list("tag", "gpu__uuid", "started_at", "ended_at"))


def test_a_query_compiled_once_reads_what_the_whole_query_reads_for_each_subquery(allocations):
    statement = CompiledQuery(_wide, ids=CompiledQuery.SUBQUERY)
    for ids in [Allocation.objects.values("pk"), Allocation.objects.filter(ended_at__isnull=True).values("pk"),
                Allocation.objects.filter(gpu__uuid__in=["GPU-a100-0", "GPU-h100-1"]).order_by("pk").values("pk")[:1],
                Allocation.objects.filter(pk=-1).values("pk")]:
        assert statement.rows(ids=ids) == [tuple(r) for r in _wide(ids)]
    first = statement.sql_params(ids=Allocation.objects.values("pk"))[0]
    assert statement.sql_params(ids=Allocation.objects.values("pk"))[0] == first and "rota_compiled" not in first
    assert statement.rows(ids=Allocation.objects.none().values("pk")) == []


def test_a_query_with_a_literal_percent_is_refused():
    """Its "%s" could not be told from the parameters' placeholders."""
    from django.db.models.expressions import RawSQL

    statement = CompiledQuery(lambda ids: Allocation.objects.filter(pk__in=ids).annotate(p=RawSQL("'50%%'", ()))
                              .values_list("pk", "p"), ids=CompiledQuery.SUBQUERY)
    with pytest.raises(ImproperlyConfigured, match="literal"):
        statement.sql_params(ids=Allocation.objects.values("pk"))
