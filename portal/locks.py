"""The registry of PostgreSQL advisory-lock keys: one place, so two jobs never pick the same number."""

SCHEDULING_CYCLE = 7_001
NODE_LIVENESS = 7_002
USAGE_ROLLUP = 7_003
WHATIF = 7_004
TEAM_UNIX_ID = 7_005
AUTOSCALE = 7_022  # the autoscaler of inference services (scheduler.services.autoscale)


def try_xact_lock(key: int) -> bool:
    """Take the advisory lock ``key`` for the current transaction, without waiting; False if another
    transaction holds it. Always True off PostgreSQL (the single-process SQLite demo needs no lock)."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return True
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [key])
        return bool(cursor.fetchone()[0])


def xact_lock(key: int) -> None:
    """Take the advisory lock ``key`` for the current transaction, waiting for it (a no-op off PostgreSQL)."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [key])
