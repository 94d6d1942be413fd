"""The reference rows a submit looks up are remembered per process, and every change to them counts from the
first submit after its commit: a GPU model added, a restricted class granted or taken back, a pool's images or
teams changed, a member removed, a kind's image set, whatever writes them (the ORM, ``QuerySet.update``, SQL)."""

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from portal.models import Membership
from scheduler.models import GpuModel, KindImage, Pool, PriorityClass
from scheduler.services import reference
from scheduler.services.jobs import job_submit
from tests.factories import GpuModelFactory

pytestmark = pytest.mark.django_db

VALID = {"name": "resnet", "command": "python train.py", "gpus": 1, "gpu_model": "h100-80gb"}


def _submit(client, **changes):
    return client.post("/api/v1/jobs/", {**VALID, **changes}, format="json")


def test_a_warm_submit_reads_no_reference_table(api, alice):
    client = api(alice)
    assert _submit(client).status_code == 201  # the lookups are read once
    with CaptureQueriesContext(connection) as captured:
        assert _submit(client).status_code == 201
    sql = " ".join(q["sql"] for q in captured.captured_queries)
    for table in ("scheduler_gpumodel", "scheduler_priorityclass", "scheduler_pool", "scheduler_kindimage",
                  "portal_team", "portal_membership"):
        assert f'"{table}"' not in sql, sql
    assert "rota_reference_version" in sql


def test_the_version_moves_with_every_write_to_a_reference_table_however_made(cluster):
    seen = {reference.version()}
    GpuModelFactory(name="l40s-48gb", memory_mb=49152)
    seen.add(reference.version())
    GpuModel.objects.filter(name="l40s-48gb").update(display_name="L40S")  # no save(), no signal
    seen.add(reference.version())
    with connection.cursor() as cursor:
        cursor.execute("UPDATE scheduler_pool SET description = 'by hand'")
    seen.add(reference.version())
    cluster["pool"].teams.remove(cluster["nlp"])
    seen.add(reference.version())
    assert len(seen) == 5


def test_a_rolled_back_writes_number_is_never_seen_again(cluster):
    before = reference.version()
    with pytest.raises(RuntimeError), transaction.atomic():
        GpuModelFactory(name="l40s-48gb", memory_mb=49152)
        inside = reference.version()
        raise RuntimeError("rolled back")
    assert reference.version() == before
    GpuModelFactory(name="a10-24gb", memory_mb=24576)
    assert reference.version() not in (before, inside)


def test_a_gpu_model_added_or_renamed_counts_at_the_next_submit(api, alice, cluster):
    client = api(alice)
    assert _submit(client, gpu_model="l40s-48gb").status_code == 400
    GpuModelFactory(name="l40s-48gb", memory_mb=49152)
    assert _submit(client, gpu_model="l40s-48gb").status_code == 201
    GpuModel.objects.filter(name="l40s-48gb").update(name="l40s")
    answer = _submit(client, gpu_model="l40s-48gb")
    assert answer.status_code == 400 and "gpu_model" in answer.json()["errors"]
    assert "l40s" in answer.json()["errors"]["gpu_model"][0]  # the known names, as they are now


def test_a_member_removed_cannot_submit_at_the_next_request(api, alice, cluster):
    client = api(alice)
    assert _submit(client).status_code == 201
    Membership.objects.filter(user=alice).delete()
    answer = _submit(client)
    assert answer.status_code == 400 and "team" in answer.json()["errors"]


def test_a_restricted_class_granted_and_taken_back_counts_at_once(alice, cluster):
    from django.core.exceptions import ValidationError

    PriorityClass.objects.filter(name="production-inference").update(restricted=True)
    with pytest.raises(ValidationError, match="restricted"):
        job_submit(user=alice, name="j", command="x", priority_class="production-inference")
    granted = PriorityClass.objects.get(name="production-inference")
    granted.teams.add(cluster["vision"])
    assert job_submit(user=alice, name="j", command="x", priority_class="production-inference").pk
    granted.teams.remove(cluster["vision"])
    with pytest.raises(ValidationError, match="restricted"):
        job_submit(user=alice, name="j", command="x", priority_class="production-inference")


def test_a_pools_images_and_teams_count_at_once(api, alice, cluster):
    client = api(alice)
    assert _submit(client, image="localhost/rota/python:3.12", pool="train").status_code == 201
    Pool.objects.filter(name="train").update(allowed_images=["registry.example.com/*"])
    answer = _submit(client, image="localhost/rota/python:3.12", pool="train")
    assert answer.status_code == 400 and "image" in answer.json()["errors"]
    cluster["pool"].teams.remove(cluster["vision"])
    answer = _submit(client, image="registry.example.com/x:1", pool="train")
    assert answer.status_code == 400 and "pool" in answer.json()["errors"]


def test_a_kinds_image_set_by_an_admin_counts_at_the_next_submit(alice, cluster):
    first = job_submit(user=alice, name="a", command="x", kind="evaluation")
    KindImage.objects.create(kind="evaluation", image="localhost/rota/eval:2")
    second = job_submit(user=alice, name="b", command="x", kind="evaluation")
    assert first.image != second.image == "localhost/rota/eval:2"


def test_a_budget_found_spent_blocks_the_next_submit(api, alice, cluster):
    from decimal import Decimal

    from accounting.models import Budget
    from scheduler.services.common import db_now

    client = api(alice)
    budget = Budget.objects.create(team=cluster["vision"], unit=Budget.MONEY, amount=Decimal("80"), enforce=True,
                                   action=Budget.BLOCK)
    assert _submit(client).status_code == 201
    Budget.objects.filter(pk=budget.pk).update(used=Decimal("90"), exceeded_at=db_now())  # as the refresh does
    answer = _submit(client)
    assert answer.status_code == 400 and "budget" in answer.json()["errors"]["team"][0]


def test_numbers_start_from_the_clock_so_a_database_made_again_never_repeats_one(db):
    assert reference.version() > 1_700_000_000 * 1_000_000  # microseconds since 1970, at least 2023's
