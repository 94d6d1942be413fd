"""The API tokens and their users under the reference version (``scheduler.services.reference.Reference.api_token``):
a token added, changed or deleted, a user changed or deleted, moves the number in the writer's transaction, as
the reference tables' writes do (``0021``). Except a login: Django stamps ``auth_user.last_login`` at each browser
login, which changes nothing a token's request reads, so an update that changes that column alone leaves the
number (a row trigger comparing the row before and after, every other column included, a new one too)."""

from django.db import migrations

FORWARD = """
CREATE TRIGGER rota_reference_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON authtoken_token
    FOR EACH STATEMENT EXECUTE FUNCTION rota_reference_changed();
CREATE TRIGGER rota_reference_changed AFTER DELETE OR TRUNCATE ON auth_user
    FOR EACH STATEMENT EXECUTE FUNCTION rota_reference_changed();
CREATE TRIGGER rota_reference_changed_row AFTER UPDATE ON auth_user FOR EACH ROW
    WHEN ((to_jsonb(OLD) - 'last_login') IS DISTINCT FROM (to_jsonb(NEW) - 'last_login'))
    EXECUTE FUNCTION rota_reference_changed();
"""

BACKWARD = """
DROP TRIGGER rota_reference_changed_row ON auth_user;
DROP TRIGGER rota_reference_changed ON auth_user;
DROP TRIGGER rota_reference_changed ON authtoken_token;
"""


class Migration(migrations.Migration):

    dependencies = [
        ("scheduler", "0022_merge_20261206_2109"),
        ("authtoken", "0004_alter_tokenproxy_options"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
