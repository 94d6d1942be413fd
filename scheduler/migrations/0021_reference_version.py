"""The reference version (``scheduler.services.reference``): a single row that every write to the tables a submit
looks up sets to a fresh number, in the writer's own transaction, so a process that remembers those rows knows at
its next read whether any of them changed. A trigger per table, per statement: whatever writes (an admin's form, a
service, ``QuerySet.update``, SQL by hand, ``TRUNCATE``), the number moves; numbers come from a sequence, so a
rolled-back write's number is never seen again, and they start from the clock, so neither is a number of a
database dropped and made again."""

from django.db import migrations

# The tables scheduler.services.reference reads (and the many-to-many tables of their grants).
TABLES = ("scheduler_gpumodel", "scheduler_priorityclass", "scheduler_priorityclass_teams", "scheduler_pool",
          "scheduler_pool_teams", "scheduler_kindimage", "portal_team", "portal_membership", "accounting_budget")

FORWARD = """
CREATE SEQUENCE rota_reference_version_seq;
-- From the clock's microseconds: a database made again under running processes never repeats their number.
SELECT setval('rota_reference_version_seq', (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
CREATE TABLE rota_reference_version (id smallint PRIMARY KEY CHECK (id = 1), n bigint NOT NULL);
INSERT INTO rota_reference_version VALUES (1, nextval('rota_reference_version_seq'));
CREATE FUNCTION rota_reference_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE rota_reference_version SET n = nextval('rota_reference_version_seq');
    RETURN NULL;
END $$;
""" + "".join(f"""
CREATE TRIGGER rota_reference_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON {table}
    FOR EACH STATEMENT EXECUTE FUNCTION rota_reference_changed();""" for table in TABLES)

BACKWARD = "".join(f"DROP TRIGGER rota_reference_changed ON {table};\n" for table in TABLES) + """
DROP FUNCTION rota_reference_changed();
DROP TABLE rota_reference_version;
DROP SEQUENCE rota_reference_version_seq;
"""


class Migration(migrations.Migration):

    dependencies = [
        ("scheduler", "0020_transition_indexes"),
        ("portal", "0005_merge_0003_sso_group_rules_0004_team_unix_id_required"),
        ("accounting", "0006_budget_actions_alerts"),
    ]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
