"""The default scheduling policy, ``rota`` v1, equal to the engine's built-in ``Policy()`` of this release (the
values are written out: a migration keeps the history it made), active from the migration on."""

from django.db import migrations
from django.utils import timezone

DEFAULT = {"ordering": "fairshare", "backfill": True, "preemption": True, "borrowing": True, "placement": "binpack",
           "fair_share_half_life_s": 7 * 24 * 3600.0, "guarantee_first": True, "las_thresholds_gpu_s": [],
           "preemption_scope": "team", "reclaim": True}


def create_default(apps, schema_editor):
    SchedulingPolicy = apps.get_model("scheduler", "SchedulingPolicy")
    PolicyVersion = apps.get_model("scheduler", "PolicyVersion")
    PolicyActivation = apps.get_model("scheduler", "PolicyActivation")
    if SchedulingPolicy.objects.exists():
        return
    policy = SchedulingPolicy.objects.create(
        name="rota", description="Fair share within priority, borrowing with reclaim, preemption, backfill.")
    version = PolicyVersion.objects.create(policy=policy, number=1, reason="the built-in default", **DEFAULT)
    PolicyActivation.objects.create(version=version, at=timezone.now(), reason="the built-in default")


def remove_default(apps, schema_editor):
    for model in ("PolicyActivation", "PolicyVersion", "SchedulingPolicy"):  # historical models: plain managers
        apps.get_model("scheduler", model).objects.all().delete()


class Migration(migrations.Migration):
    dependencies = [("scheduler", "0016_scheduling_policies")]
    operations = [migrations.RunPython(create_default, remove_default)]
