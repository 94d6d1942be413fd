"""Govern -> Images: platform admins set each kind's default image and each pool's allow-list; every change
says why and lands in the audit log; bad entries are named and nothing is half-saved; jobs follow."""

import pytest
from django.test import Client

from portal.models import AuditEntry
from scheduler.cycle import run_cycle
from scheduler.models import Job, KindImage, Pool
from scheduler.services.jobs import job_submit

pytestmark = pytest.mark.django_db


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def post_pool(user, pool="train", images="", reason="open the team registry"):
    return client_for(user).post(f"/govern/images/pools/{pool}/",
                                 {f"pool-{pool}-allowed_images": images, f"pool-{pool}-reason": reason})


def post_kind(user, kind="training", image="", reason="new base image"):
    return client_for(user).post(f"/govern/images/kinds/{kind}/",
                                 {f"kind-{kind}-image": image, f"kind-{kind}-reason": reason})


def test_the_page_shows_each_kinds_default_and_each_pools_allow_list(staff, cluster):
    KindImage.objects.create(kind="evaluation", image="localhost/rota/eval:1")
    page = client_for(staff).get("/govern/images/").content.decode()
    assert "localhost/rota/python:3.11" in page  # the site's default
    assert 'value="localhost/rota/eval:1"' in page
    assert "Pool train" in page and "localhost/rota/*</textarea>" in page


def test_an_admin_sets_a_pools_allow_list_with_a_reason_and_it_is_audited(staff, cluster):
    response = post_pool(staff, images="localhost/rota/*\nRegistry.Example.com/vision/, localhost/rota/*")
    assert response.status_code == 302
    assert Pool.objects.get(name="train").allowed_images == ["localhost/rota/*", "registry.example.com/vision/"]
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.object_name, entry.actor_name) == ("pool.images", "train", "root")
    assert entry.before == {"allowed_images": ["localhost/rota/*"]}
    assert entry.after == {"allowed_images": ["localhost/rota/*", "registry.example.com/vision/"]}
    assert entry.reason == "open the team registry"


def test_a_bad_allow_list_entry_is_named_and_nothing_is_saved(staff, cluster):
    response = post_pool(staff, images="registry.example.com/ok/\nnot a registry")
    assert response.status_code == 400
    assert "&#x27;not a registry&#x27; is not an allow-list entry" in response.content.decode()
    assert Pool.objects.get(name="train").allowed_images == ["localhost/rota/*"]
    assert not AuditEntry.objects.exists()


def test_a_change_without_a_reason_is_refused(staff, cluster):
    response = post_pool(staff, images="registry.example.com/", reason="")
    assert response.status_code == 400 and "a reason is required" in response.content.decode()
    assert Pool.objects.get(name="train").allowed_images == ["localhost/rota/*"] and not AuditEntry.objects.exists()


def test_a_pending_job_whose_image_its_pool_stops_allowing_waits_with_image_not_allowed(staff, alice, cluster):
    job = job_submit(user=alice, name="j", command="x", gpu_model="h100-80gb")
    assert post_pool(staff, images="registry.example.com/").status_code == 302
    run_cycle()
    job.refresh_from_db()
    assert job.state == "pending" and job.pending_reason_code == "ImageNotAllowed"


def test_an_admin_sets_a_kinds_default_image_and_new_jobs_of_the_kind_run_in_it(staff, alice, cluster):
    assert post_kind(staff, image="localhost/rota/torch:2.3").status_code == 302
    assert KindImage.objects.get(kind="training").image == "localhost/rota/torch:2.3"
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.object_name, entry.before, entry.after) == (
        "kind.image", "training", {"image": None}, {"image": "localhost/rota/torch:2.3"})
    job = job_submit(user=alice, name="j", command="x")
    assert Job.objects.get(pk=job.pk).image == "localhost/rota/torch:2.3"
    cards = client_for(alice).get("/jobs/new/").content.decode()  # the submit page's kind cards say so
    assert "localhost/rota/torch:2.3</span>" in cards and "localhost/rota/python:3.11</span>" in cards
    assert post_kind(staff, image="", reason="back to the site's").status_code == 302
    assert not KindImage.objects.filter(kind="training").exists()
    assert AuditEntry.objects.latest("id").after == {"image": None}


def test_a_default_image_no_pool_allows_is_refused_naming_why(staff, cluster):
    response = post_kind(staff, image="registry.example.com/x/y:1")
    assert response.status_code == 400
    assert "is allowed in no pool, so no training job could run in it" in response.content.decode()
    assert not KindImage.objects.exists() and not AuditEntry.objects.exists()
    response = post_kind(staff, image="python:3.11")
    assert response.status_code == 400 and "name the registry" in response.content.decode()


def test_the_submit_form_shows_why_an_image_is_refused(alice, cluster):
    response = client_for(alice).post("/jobs/new/", {"team": "vision", "name": "x", "kind": "training",
                                                     "command": "true", "gpus": 1,
                                                     "image": "registry.example.com/x/y:1"})
    assert response.status_code == 200 and not Job.objects.exists()
    assert "registry.example.com/x/y:1 is not allowed in the pools team vision may use" in response.content.decode()
