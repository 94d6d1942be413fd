"""Policy versions and activations are history: PostgreSQL refuses to delete them or change what they record
(a version's knobs, number, policy, time and reason; an activation's version, time and reason), whoever asks —
the ORM, the admin shell or raw SQL. Only the people references may still be cleared (a deleted user)."""

from django.db import migrations

VERSION_KEPT = ("policy_id", "number", "ordering", "backfill", "preemption", "borrowing", "placement",
                "fair_share_half_life_s", "guarantee_first", "las_thresholds_gpu_s", "preemption_scope", "reclaim",
                "created_at", "reason")
ACTIVATION_KEPT = ("version_id", "at", "reason")


def function(table: str, kept: tuple[str, ...]) -> str:
    """A trigger function for ``table``: no DELETE, no UPDATE of the ``kept`` columns."""
    new, old = (", ".join(f"{side}.{c}" for c in kept) for side in ("NEW", "OLD"))
    return f"""
CREATE OR REPLACE FUNCTION {table}_immutable() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION '{table} rows are immutable: they are never deleted'
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF ({new}) IS DISTINCT FROM ({old}) THEN
        RAISE EXCEPTION '{table} rows are immutable: record a new one instead'
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END
$$ LANGUAGE plpgsql;
"""


TABLES = {"scheduler_policyversion": VERSION_KEPT, "scheduler_policyactivation": ACTIVATION_KEPT}


def forward(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":  # the SQLite demo: the models' own refusal only
        return
    for table, kept in TABLES.items():
        schema_editor.execute(function(table, kept), params=None)
        schema_editor.execute(f"CREATE TRIGGER {table}_immutable BEFORE UPDATE OR DELETE ON {table} "
                              f"FOR EACH ROW EXECUTE FUNCTION {table}_immutable()", params=None)


def backward(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for table in TABLES:
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_immutable ON {table}", params=None)
        schema_editor.execute(f"DROP FUNCTION IF EXISTS {table}_immutable()", params=None)


class Migration(migrations.Migration):
    dependencies = [("scheduler", "0017_default_scheduling_policy")]
    operations = [migrations.RunPython(forward, backward)]
