"""Submission by workload kind and saved job templates: kind cards preset the kind's defaults, GPU models
are offered only from the team's pools, inference replicas, notebook idle timeout, templates saved by
team-admins, applied by members, hidden from outsiders (404)."""

import pytest
from django.test import Client

from portal.models import AuditEntry, Membership
from scheduler.models import Job, JobTemplate
from tests.factories import GpuFactory, GpuModelFactory, MembershipFactory, NodeFactory, PoolFactory, UserFactory

pytestmark = pytest.mark.django_db


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def vision_admin(cluster):
    user = UserFactory(username="victor")
    MembershipFactory(user=user, team=cluster["vision"], role=Membership.TEAM_ADMIN)
    return user


@pytest.fixture
def template(cluster, vision_admin):
    return JobTemplate.objects.create(
        team=cluster["vision"], name="resnet-4gpu", kind="training", created_by=vision_admin,
        fields={"name": "resnet", "command": "torchrun train.py", "gpus": 4, "gpu_model": "h100-80gb",
                "time_limit_minutes": 600},
    )


def form_data(**kw):
    return {"team": "vision", "name": "web", "kind": "training", "command": "echo hi", "gpus": 1,
            "gpu_model": "h100-80gb", **kw}


def test_the_submit_page_offers_every_kind_with_its_defaults(alice):
    page = client_for(alice).get("/jobs/new/").content.decode()
    for title in ("Training", "Inference service", "Notebook", "Data processing", "Evaluation", "Agent task"):
        assert title in page
    assert "production-inference" in page and "idle 60 min" in page and "restarts on failure" in page


def test_a_kind_card_presets_the_kinds_defaults(alice):
    page = client_for(alice).get("/jobs/new/?kind=notebook").content.decode()
    assert '<option value="notebook" selected>' in page
    assert 'name="time_limit_minutes" value="720"' in page
    assert 'name="idle_timeout_minutes" value="60"' in page
    assert '<option value="interactive" selected data-teams="vision">' in page


def test_gpu_models_are_offered_only_from_pools_the_team_may_use(alice, cluster):
    l40s = GpuModelFactory(name="l40s-48gb", memory_mb=49152)
    serving = PoolFactory(name="serving")
    serving.teams.add(cluster["nlp"])
    GpuFactory(node=NodeFactory(name="node-l40s", pool=serving), index=0, model=l40s)
    page = client_for(alice).get("/jobs/new/").content.decode()
    assert 'value="h100-80gb"' in page and "l40s-48gb" not in page
    response = client_for(alice).post("/jobs/new/", form_data(gpu_model="l40s-48gb"))
    assert response.status_code == 200 and not Job.objects.exists()
    assert "l40s-48gb" in response.content.decode()  # named in the inline error


def test_a_team_without_pools_is_offered_no_model_and_told_why(alice, cluster):
    cluster["pool"].teams.remove(cluster["vision"])
    response = client_for(alice).post("/jobs/new/", form_data())
    assert "allowed: none" in response.content.decode() or "Select a valid choice" in response.content.decode()
    assert not Job.objects.exists()


def test_an_inference_service_submits_one_job_per_replica_with_its_health_path(alice):
    response = client_for(alice).post("/jobs/new/", form_data(kind="inference", name="llm", replicas=3,
                                                              health_path="/ready", nodes=2))
    assert response.status_code == 302
    jobs = list(Job.objects.order_by("id"))
    assert [j.name for j in jobs] == ["llm-1", "llm-2", "llm-3"]
    assert all(j.env == {"ROTA_HEALTH_PATH": "/ready"} and j.priority_class.name == "production-inference"
               and j.nodes is None and not j.preemptible for j in jobs)


def test_a_notebook_keeps_its_idle_timeout_and_training_its_nodes(alice):
    client = client_for(alice)
    client.post("/jobs/new/", form_data(kind="notebook", name="nb", idle_timeout_minutes=30))
    client.post("/jobs/new/", form_data(kind="training", name="gang", gpus=4, nodes=2, idle_timeout_minutes=30,
                                        preemptible="no"))
    nb, gang = Job.objects.get(name="nb"), Job.objects.get(name="gang")
    assert nb.idle_timeout_minutes == 30 and nb.priority_class.name == "interactive"
    assert gang.nodes == 2 and gang.idle_timeout_minutes is None and gang.preemptible is False


def test_a_team_admin_saves_the_form_as_a_template_without_submitting(vision_admin):
    # The browser sends every field, the ones its kind hides included (here an inference health path).
    response = client_for(vision_admin).post("/jobs/new/", form_data(
        action="save-template", template_name="quick-h100", kind="evaluation", gpus=2, time_limit_minutes=90,
        replicas=1, health_path="/health", idle_timeout_minutes=30))
    assert response.status_code == 200 and not Job.objects.exists()
    template = JobTemplate.objects.get()
    assert template.team.name == "vision" and template.kind == "evaluation" and template.created_by == vision_admin
    assert template.fields["gpus"] == 2 and template.fields["command"] == "echo hi" and "team" not in template.fields
    assert not {"replicas", "health_path", "idle_timeout_minutes"} & set(template.fields)
    assert AuditEntry.objects.get().action == "job-template.create"


def test_members_cannot_save_templates(alice):
    response = client_for(alice).post("/jobs/new/", form_data(action="save-template", template_name="mine"))
    assert "Save these values as a team template" not in response.content.decode()
    assert "only team-admins" in response.content.decode()
    assert not JobTemplate.objects.exists() and not Job.objects.exists()


def test_a_template_needs_a_name(vision_admin):
    response = client_for(vision_admin).post("/jobs/new/", form_data(action="save-template", template_name=" "))
    assert "name the template" in response.content.decode() and not JobTemplate.objects.exists()


def test_a_member_applies_a_template_to_prefill_the_form(alice, template):
    client = client_for(alice)
    page = client.get("/jobs/new/").content.decode()
    assert f'href="?template={template.pk}"' in page
    page = client.get(f"/jobs/new/?template={template.pk}").content.decode()
    assert 'name="gpus" value="4"' in page and "torchrun train.py" in page and 'value="resnet"' in page
    assert 'name="time_limit_minutes" value="600"' in page


def test_outsiders_get_404_for_another_teams_template(charlie, template):
    client = client_for(charlie)
    assert client.get(f"/jobs/new/?template={template.pk}").status_code == 404
    assert client.get("/jobs/new/?template=999999").status_code == 404
    assert client.get("/teams/vision/templates/").status_code == 404
    assert client.post(f"/teams/vision/templates/{template.pk}/delete/").status_code == 404
    assert client.post(f"/teams/nlp/templates/{template.pk}/delete/").status_code == 404
    assert JobTemplate.objects.filter(pk=template.pk).exists()


def test_members_list_and_apply_but_do_not_delete_templates(alice, template):
    page = client_for(alice).get("/teams/vision/templates/").content.decode()
    assert "resnet-4gpu" in page and f"?template={template.pk}" in page and "Delete" not in page
    assert client_for(alice).post(f"/teams/vision/templates/{template.pk}/delete/").status_code == 404
    assert JobTemplate.objects.filter(pk=template.pk).exists()


def test_a_team_admin_deletes_a_template_with_audit(vision_admin, template):
    client = client_for(vision_admin)
    assert "Delete" in client.get("/teams/vision/templates/").content.decode()
    response = client.post(f"/teams/vision/templates/{template.pk}/delete/")
    assert response.status_code == 302 and not JobTemplate.objects.exists()
    entry = AuditEntry.objects.get()
    assert entry.action == "job-template.delete" and entry.object_name == "vision/resnet-4gpu"


def test_template_names_are_escaped(vision_admin, cluster):
    JobTemplate.objects.create(team=cluster["vision"], name="<script>x</script>", kind="training", fields={})
    page = client_for(vision_admin).get("/teams/vision/templates/").content.decode()
    assert "<script>x</script>" not in page and "&lt;script&gt;" in page


def test_inline_errors_are_tied_to_their_fields_for_screen_readers(alice):
    body = client_for(alice).post("/jobs/new/", form_data(name="", gpus=0)).content.decode()
    for field in ("name", "gpus"):
        assert f'aria-describedby="id_{field}_error"' in body and f'id="id_{field}_error"' in body


def test_placement_constraints_reach_the_job_and_are_checked(alice, cluster):
    client = client_for(alice)
    response = client.post("/jobs/new/", form_data(name="ib", pool="train", node_labels="network=ib, storage=nvme",
                                                   min_driver_version="550.54"))
    assert response.status_code == 302
    job = Job.objects.get()
    assert job.pool.name == "train" and job.node_labels == {"network": "ib", "storage": "nvme"}
    assert job.min_driver_version == "550.54"
    page = client.get(f"/jobs/new/?copy={job.pk}").content.decode()
    assert 'value="network=ib, storage=nvme"' in page and '<option value="train" selected data-teams="vision">' in page
    body = client.post("/jobs/new/", form_data(node_labels="network")).content.decode()
    assert "write labels as key=value" in body
    serving = PoolFactory(name="serving")
    serving.teams.add(cluster["nlp"])
    body = client.post("/jobs/new/", form_data(pool="serving")).content.decode()
    assert "Select a valid choice" in body or "may not use pool" in body
    assert Job.objects.count() == 1


def test_a_template_keeps_node_labels_as_text(vision_admin):
    client_for(vision_admin).post("/jobs/new/", form_data(action="save-template", template_name="ib",
                                                          node_labels="network=ib"))
    assert JobTemplate.objects.get().fields["node_labels"] == "network=ib"


def test_the_template_list_flags_a_template_that_no_longer_passes(alice, template, cluster):
    from scheduler.models import PriorityClass

    page = client_for(alice).get("/teams/vision/templates/").content.decode()
    assert "Change before submitting" not in page
    JobTemplate.objects.filter(pk=template.pk).update(fields={**template.fields, "priority_class": "interactive"})
    interactive = PriorityClass.objects.get(name="interactive")
    interactive.restricted = True
    interactive.save()
    interactive.teams.add(cluster["nlp"])
    page = client_for(alice).get("/teams/vision/templates/").content.decode()
    assert "Change before submitting: priority_class: priority class interactive is restricted" in page
