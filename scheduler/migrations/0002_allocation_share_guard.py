"""PostgreSQL guard: the open shares of one GPU never add up to more than the whole device.

The partial unique index in 0001 already stops two open exclusive allocations of one GPU; this trigger
covers shared (fractional) allocations too. It locks the GPU row so concurrent inserts serialize.
"""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION rota_allocation_share_guard() RETURNS trigger AS $$
DECLARE
    total integer;
BEGIN
    IF NEW.ended_at IS NOT NULL THEN
        RETURN NEW;
    END IF;
    PERFORM 1 FROM scheduler_gpu WHERE id = NEW.gpu_id FOR UPDATE;
    SELECT COALESCE(SUM(share_milli), 0) INTO total
      FROM scheduler_allocation
     WHERE gpu_id = NEW.gpu_id AND ended_at IS NULL AND id IS DISTINCT FROM NEW.id;
    IF total + NEW.share_milli > 1000 THEN
        RAISE EXCEPTION 'GPU % over-committed: % + % thousandths', NEW.gpu_id, total, NEW.share_milli
            USING ERRCODE = 'exclusion_violation';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER rota_allocation_share_guard
    BEFORE INSERT OR UPDATE OF ended_at, share_milli, gpu_id ON scheduler_allocation
    FOR EACH ROW EXECUTE FUNCTION rota_allocation_share_guard();
"""
DROP = """
DROP TRIGGER IF EXISTS rota_allocation_share_guard ON scheduler_allocation;
DROP FUNCTION IF EXISTS rota_allocation_share_guard();
"""


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE, params=None)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [("scheduler", "0001_initial")]
    operations = [migrations.RunPython(forwards, backwards)]
