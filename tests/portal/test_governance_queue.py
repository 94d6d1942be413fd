"""The admin queue per pool (engine order, reasons, hold/release, priority-class changes, audited) and the
nodes page's utilization heatmap. Staff only: members get 404."""

import json

import pytest
from django.test import Client

from portal.governance.selectors import gpu_heatmap, queue_by_pool
from portal.models import AuditEntry
from scheduler.cycle import run_cycle
from scheduler.models import Gpu, Job
from scheduler.services.jobs import job_submit
from tests.assets import external_assets
from tests.factories import GpuFactory, GpuModelFactory, NodeFactory, PoolFactory

pytestmark = pytest.mark.django_db


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def submit(user, **kw):
    return job_submit(user=user, **{"name": "train", "command": "true", "gpu_model": "h100-80gb", **kw})


@pytest.fixture
def backlog(alice, charlie, cluster):
    """vision fills the h100s; three jobs wait (one of them nlp's); one a100 job waits behind a held one."""
    submit(alice, name="fills", gpus=4)
    run_cycle()
    jobs = {
        "a": submit(alice, name="waits-a", gpus=2),
        "b": submit(charlie, name="waits-b", gpus=1),
        "c": submit(alice, name="waits-c", gpus=1, priority_class="batch"),
    }
    run_cycle()
    return jobs


def test_the_queue_is_for_staff_only(alice, staff):
    assert client_for(alice).get("/govern/queue/").status_code == 404
    assert client_for(staff).get("/govern/queue/").status_code == 200


def test_members_cannot_hold_release_or_reprioritize_through_the_admin_queue(alice, backlog):
    job = backlog["a"]
    client = client_for(alice)
    assert client.post(f"/govern/queue/{job.pk}/hold/").status_code == 404
    assert client.post(f"/govern/queue/{job.pk}/priority/", {"priority_class": "interactive"}).status_code == 404
    job.refresh_from_db()
    assert job.state == "pending" and job.priority_class.name == "training"
    assert not AuditEntry.objects.exists()


def test_waiting_jobs_are_listed_per_pool_in_engine_order_with_reasons(staff, backlog, cluster):
    queues = queue_by_pool()
    assert [q.name for q in queues] == ["train"]
    names = [j.name for j in queues[0].jobs]
    assert sorted(names) == ["waits-a", "waits-b", "waits-c"]
    positions = [j.queue_position for j in queues[0].jobs]
    assert positions == sorted(positions) and None not in positions
    assert names[-1] == "waits-c"  # batch runs after training
    page = client_for(staff).get("/govern/queue/?pool=train").content.decode()
    assert "waits-a" in page and backlog["a"].__class__.objects.get(pk=backlog["a"].pk).pending_reason_code in page


def test_a_job_that_fits_no_pool_is_listed_apart(staff, alice, cluster):
    cluster["pool"].teams.remove(cluster["vision"])
    submit(alice, name="orphan")
    queues = queue_by_pool()
    assert queues[-1].name == "no matching pool" and [j.name for j in queues[-1].jobs] == ["orphan"]
    assert queues[0].jobs == []


def test_a_job_is_listed_in_each_pool_it_could_use(staff, alice, cluster):
    other = PoolFactory(name="spare")
    other.teams.add(cluster["vision"])
    GpuFactory(node=NodeFactory(name="node-spare", pool=other), index=0, model=cluster["h100"])
    submit(alice, name="anywhere")
    submit(alice, name="pinned", pool="spare")
    queues = {q.name: [j.name for j in q.jobs] for q in queue_by_pool()}
    assert queues == {"spare": ["anywhere", "pinned"], "train": ["anywhere"]}
    assert [q.name for q in queue_by_pool(pool="spare")] == ["spare"]


def test_an_admin_holds_and_releases_with_audit(api, staff, backlog, django_capture_on_commit_callbacks):
    job = backlog["b"]
    client = client_for(staff)
    # Without a reason (or with one longer than the audit log keeps) nothing changes, and the page says why.
    for reason, error in (("", "a reason is required"), ("x" * 501, "at most 500 characters (this one has 501)")):
        response = client.post(f"/govern/queue/{job.pk}/hold/", {"pool": "train", "reason": reason}, follow=True)
        assert error in response.content.decode()
        job.refresh_from_db()
        assert job.state == "pending"
    response = client.post(f"/govern/queue/{job.pk}/hold/", {"pool": "train", "reason": "disk quota incident"})
    assert response.status_code == 302 and response.url == "/govern/queue/?pool=train"
    job.refresh_from_db()
    assert job.state == "held"
    # The team reads the admin's reason on its job ("Held by …"), and may not release an admin's hold.
    assert job.pending_reason_message == f"by {staff}: disk quota incident"
    owner = client_for(job.submitted_by)
    assert "Release</button>" not in owner.get(f"/jobs/{job.pk}/").content.decode()
    refused = owner.post(f"/jobs/{job.pk}/release/")
    assert refused.status_code == 403 and "only a platform admin may release it" in refused.content.decode()
    refused = api(job.submitted_by).post(f"/api/v1/jobs/{job.pk}/release/")
    assert refused.status_code == 403 and "only a platform admin may release it" in refused.json()["detail"]
    job.refresh_from_db()
    assert job.state == "held"
    with django_capture_on_commit_callbacks() as callbacks:
        client.post(f"/govern/queue/{job.pk}/release/", {"reason": "incident over"})
    job.refresh_from_db()
    # Back in the queue: it says so until the next cycle has placed it, not "Held".
    assert job.state == "pending" and callbacks
    assert (job.pending_reason_code, job.queue_position) == ("Scheduling", None)
    assert list(job.transitions.order_by("id").values_list("cause", flat=True))[-2:] == [
        f"held by {staff}: disk quota incident", f"released by {staff}: incident over"]
    assert list(AuditEntry.objects.order_by("id").values_list("action", "before", "after", "reason")) == [
        ("job.hold", {"state": "pending"}, {"state": "held"}, "disk quota incident"),
        ("job.release", {"state": "held"}, {"state": "pending"}, "incident over"),
    ]


def test_an_admin_changes_a_waiting_jobs_priority_class_with_audit_and_a_cycle(
    staff, backlog, django_capture_on_commit_callbacks
):
    job = backlog["c"]
    with django_capture_on_commit_callbacks() as callbacks:
        response = client_for(staff).post(f"/govern/queue/{job.pk}/priority/",
                                          {"priority_class": "interactive", "reason": "demo tomorrow"})
    assert response.status_code == 302 and len(callbacks) == 1
    job.refresh_from_db()
    assert job.priority_class.name == "interactive"
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.before, entry.after, entry.reason) == (
        "job.priority-class", {"priority_class": "batch"}, {"priority_class": "interactive"}, "demo tomorrow")
    run_cycle()
    queue = [j.name for j in queue_by_pool()[0].jobs]
    assert queue[0] == "waits-c"


@pytest.mark.parametrize("reason", ["", "   "])
def test_a_priority_class_change_needs_a_reason(staff, backlog, reason):
    job = backlog["c"]
    response = client_for(staff).post(f"/govern/queue/{job.pk}/priority/",
                                      {"priority_class": "interactive", "reason": reason}, follow=True)
    assert f"Job #{job.pk}: a reason is required" in response.content.decode()
    job.refresh_from_db()
    assert job.priority_class.name == "batch" and not AuditEntry.objects.exists()


def test_the_queue_page_asks_for_the_reason(staff, backlog):
    page = client_for(staff).get("/govern/queue/").content.decode()
    # Each action asks for its own reason: to hold (or release), and to change the priority class.
    assert 'name="reason" placeholder="why hold (required)" maxlength="500" required' in page
    assert 'name="reason" placeholder="why (required)" maxlength="500" required' in page


@pytest.mark.parametrize("body", [{}, {"reason": ""}, {"reason": " "}])
def test_the_api_needs_a_reason_to_change_a_priority_class(api, staff, backlog, body):
    job = backlog["c"]
    response = api(staff).post(f"/api/v1/jobs/{job.pk}/priority-class/", {"priority_class": "interactive", **body},
                               format="json")
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert set(errors) == {"reason"} and errors["reason"][0].startswith("a reason is required")
    job.refresh_from_db()
    assert job.priority_class.name == "batch" and not AuditEntry.objects.exists()


def test_every_problem_of_a_priority_class_change_is_named_at_once(api, staff, backlog):
    running = Job.objects.get(name="fills")
    response = api(staff).post(f"/api/v1/jobs/{running.pk}/priority-class/", {"priority_class": "batch"},
                               format="json")
    assert set(response.json()["errors"]) == {"reason", "state"}


def test_a_running_job_keeps_its_priority_class(staff, backlog):
    running = Job.objects.get(name="fills")
    response = client_for(staff).post(f"/govern/queue/{running.pk}/priority/",
                                      {"priority_class": "batch", "reason": "cheaper"}, follow=True)
    running.refresh_from_db()
    assert running.priority_class.name == "training"
    assert "only a pending or held job" in response.content.decode()
    assert not AuditEntry.objects.exists()


def test_an_unknown_priority_class_is_refused(staff, backlog):
    job = backlog["a"]
    response = client_for(staff).post(f"/govern/queue/{job.pk}/priority/", {"priority_class": "vip"}, follow=True)
    assert "Select a valid choice" in response.content.decode()
    job.refresh_from_db()
    assert job.priority_class.name == "training"


def test_the_nodes_page_draws_a_gpu_utilization_heatmap_from_local_plotly(staff, cluster):
    Gpu.objects.filter(uuid="GPU-h100-1").update(util_pct=87.25)
    figure = gpu_heatmap()["figure"]
    trace = figure["data"][0]
    assert trace["type"] == "heatmap" and trace["x"] == ["node-a100", "node-h100"]
    assert trace["y"] == ["gpu0", "gpu1", "gpu2", "gpu3"]
    assert trace["z"][1][1] == 87.2 or trace["z"][1][1] == 87.3
    assert trace["z"][3][0] is None  # node-a100 has two GPUs
    page = client_for(staff).get("/govern/nodes/").content.decode()
    assert "/static/vendor/plotly/plotly.min.js" in page and external_assets(page) == []
    data = page.split('id="gpu-heatmap-data" type="application/json">', 1)[1].split("</script>", 1)[0]
    assert json.loads(data)["data"][0]["type"] == "heatmap"


def test_the_heatmap_handles_an_empty_cluster(db):
    assert gpu_heatmap()["figure"]["data"][0]["z"] == []


def test_the_queue_page_runs_a_fixed_number_of_queries(staff, alice, cluster, django_assert_max_num_queries):
    a100 = GpuModelFactory(name="a100-40gb")
    for i in range(12):
        submit(alice, name=f"j{i}", gpu_model="a100-40gb" if i % 2 else "h100-80gb", gpus=4)
    assert a100
    client = client_for(staff)
    with django_assert_max_num_queries(12):
        assert client.get("/govern/queue/").status_code == 200
