"""Teams get the unprivileged uid their jobs run as on the nodes: a nullable column, existing teams filled in
(in id order, from settings.ROTA_TEAM_UID_RANGE), then the column is made required in 0004."""

from django.conf import settings
from django.db import migrations, models


def fill_unix_ids(apps, schema_editor):
    Team = apps.get_model("portal", "Team")
    low, high = settings.ROTA_TEAM_UID_RANGE
    taken = set(Team.objects.exclude(unix_id=None).values_list("unix_id", flat=True))
    free = (uid for uid in range(low, high + 1) if uid not in taken)
    for team in Team.objects.filter(unix_id=None).order_by("pk"):
        uid = next(free, None)
        if uid is None:
            raise RuntimeError(f"ROTA_TEAM_UID_RANGE ({low}-{high}) has fewer uids than there are teams: widen it")
        Team.objects.filter(pk=team.pk).update(unix_id=uid)


class Migration(migrations.Migration):
    dependencies = [("portal", "0002_audit_entry")]

    operations = [
        migrations.AddField(model_name="team", name="unix_id",
                            field=models.PositiveIntegerField(editable=False, null=True, unique=True)),
        migrations.RunPython(fill_unix_ids, migrations.RunPython.noop),
    ]
