from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("portal", "0003_team_unix_id")]

    operations = [
        migrations.AlterField(model_name="team", name="unix_id",
                              field=models.PositiveIntegerField(editable=False, unique=True)),
    ]
