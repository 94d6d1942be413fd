"""Jobs as isolated workloads, the portal's side (issue 19): each assignment names the image, the team
identity and the limits a node runs the job with; an image no pool allows is refused at submit and never
placed; what the node says about an attempt's end (OOMKilled, ImagePullFailed) is kept; a node registers
with its executor, and one that does not isolate tenants is refused where isolation is required."""

import pytest
from django.core.exceptions import ValidationError
from rest_framework.test import APIClient

from portal.models import Team
from scheduler.cycle import run_cycle
from scheduler.models import Job, KindImage, Node, Pool
from scheduler.services.jobs import job_submit
from scheduler.services.runtime import job_limits
from tests.factories import GpuFactory, NodeFactory, PoolFactory, TeamFactory

pytestmark = pytest.mark.django_db

H100_REPORT = {
    "hostname": "node-h100", "gpu_backend": "fake", "driver_version": "550.54.15", "cuda_version": "12.4",
    "cpus": 64, "memory_mb": 512000,
    "gpus": [{"index": i, "uuid": f"GPU-h100-{i}", "model": "h100-80gb", "memory_mb": 81559} for i in range(4)],
}
CONTAINER = {"name": "container", "isolates": True, "runtime": "podman 4.3.1", "detail": "runc, cgroupfs"}
PROCESS = {"name": "process", "isolates": False, "runtime": "", "detail": "laptop demo"}


def register(client, **extra):
    return client.post("/api/v1/node/register/", {**H100_REPORT, **extra}, format="json")


def assignment_of(client, job, seq=1):
    response = client.post("/api/v1/node/heartbeat/", {"seq": seq}, format="json")
    assert response.status_code == 200, response.json()
    return next(a for a in response.json()["assignments"] if a["job_id"] == job.pk)


def placed(user, **kw):
    job = job_submit(user=user, name="j", command="python3 -c 'print(1)'", gpu_model="h100-80gb", **kw)
    run_cycle()
    job.refresh_from_db()
    assert job.state == "admitted", job.pending_reason_message
    return job


def event(client, job, **body):
    response = client.post(f"/api/v1/node/jobs/{job.pk}/events/", {"attempt": job.attempt, **body}, format="json")
    job.refresh_from_db()
    return response


# -- what a node is told ---------------------------------------------------------------------------------------


def test_an_assignment_carries_the_image_the_teams_identity_and_the_requested_limits(alice, cluster, node_client):
    client = node_client()
    register(client, executor=CONTAINER)
    job = placed(alice, image="localhost/rota/torch:2.3", cpus=8, memory_gb=16)
    assignment = assignment_of(client, job)
    vision = Team.objects.get(name="vision")
    assert assignment["image"] == "localhost/rota/torch:2.3"
    assert assignment["run_as"] == {"uid": vision.unix_id, "gid": vision.unix_id, "team": "vision"}
    assert assignment["limits"] == {"cpus": 8.0, "memory_mb": 16384, "pids": 4096}


def test_a_job_without_an_image_runs_in_its_kinds_default_else_the_sites(alice, cluster, node_client, settings):
    client = node_client()
    register(client)
    KindImage.objects.create(kind="evaluation", image="localhost/rota/eval:1")
    evaluation = placed(alice, kind="evaluation")
    training = placed(alice)
    assert evaluation.image == "localhost/rota/eval:1"
    assert training.image == settings.ROTA_DEFAULT_IMAGE == "localhost/rota/python:3.11"
    assert assignment_of(client, evaluation)["image"] == "localhost/rota/eval:1"
    assert assignment_of(client, training, seq=2)["image"] == "localhost/rota/python:3.11"


def test_a_job_that_requests_no_cpus_or_memory_has_no_such_limit_and_the_site_sets_the_process_limit(
        alice, cluster, node_client, settings):
    settings.ROTA_JOB_PIDS_LIMIT = 512
    client = node_client()
    register(client)
    job = placed(alice)
    assert assignment_of(client, job)["limits"] == {"cpus": None, "memory_mb": None, "pids": 512}


def test_a_job_on_a_share_of_a_gpu_gets_that_share_of_the_nodes_cpus_and_memory_per_gpu(alice, cluster, node_client):
    client = node_client()
    register(client)  # 64 CPUs and 512000 MiB for 4 GPUs
    job = placed(alice, gpu_fraction=0.5)
    assert assignment_of(client, job)["limits"] == {"cpus": 8.0, "memory_mb": 64000, "pids": 4096}
    asked = placed(alice, gpu_fraction=0.25, cpus=2)  # what it asks for wins over the share
    assert assignment_of(client, asked, seq=2)["limits"]["cpus"] == 2.0


def test_a_gangs_request_is_split_evenly_over_its_nodes(alice, cluster):
    job = Job(team=cluster["vision"], kind="training", cpus=16, memory_gb=64, image="")
    assert job_limits(job, nodes=2) == {"cpus": 8.0, "memory_mb": 32768, "pids": 4096}


# -- team identities ---------------------------------------------------------------------------------------------


def test_every_team_gets_its_own_uid_from_the_configured_range_lowest_free_first(db, settings):
    settings.ROTA_TEAM_UID_RANGE = (30000, 30002)
    first, second = TeamFactory(name="t-one"), TeamFactory(name="t-two")
    assert (first.unix_id, second.unix_id) == (30000, 30001)
    first.delete()
    assert TeamFactory(name="t-three").unix_id == 30000  # a freed uid is taken again only once its team is gone
    assert TeamFactory(name="t-four").unix_id == 30002
    with pytest.raises(ValidationError) as refused:
        TeamFactory(name="t-five")
    assert "ROTA_TEAM_UID_RANGE (30000-30002)" in str(refused.value.message_dict["unix_id"])
    assert not Team.objects.filter(name="t-five").exists()


def test_a_teams_uid_does_not_change_when_the_team_is_saved_again(db):
    team = TeamFactory(name="t-keep")
    uid = team.unix_id
    team.display_name = "Keep"
    team.save()
    team.refresh_from_db()
    assert team.unix_id == uid


# -- images at submit --------------------------------------------------------------------------------------------


def test_an_image_no_pool_of_the_team_allows_is_refused_at_submit_naming_the_allowed_ones(alice, cluster):
    with pytest.raises(ValidationError) as refused:
        job_submit(user=alice, name="j", command="x", image="registry.example.com/team/train:1")
    message = refused.value.message_dict["image"][0]
    assert "registry.example.com/team/train:1 is not allowed" in message
    assert "pool train allows localhost/rota/*" in message
    assert not Job.objects.exists()


def test_a_short_image_name_is_refused_because_any_registry_could_answer_it(alice, cluster):
    with pytest.raises(ValidationError) as refused:
        job_submit(user=alice, name="j", command="x", image="python:3.11")
    assert "name the registry" in refused.value.message_dict["image"][0]


def test_the_api_refuses_a_disallowed_image_with_the_field_named(alice, cluster, api):
    Pool.objects.filter(name="train").update(allowed_images=["localhost/rota/*", "registry.example.com/"])
    response = api(alice).post("/api/v1/jobs/", {"name": "j", "command": "x", "image": "quay.io/evil/miner:1"},
                               format="json")
    assert response.status_code == 400
    [message] = response.json()["errors"]["image"]
    assert "pool train allows localhost/rota/*, registry.example.com/" in message
    ok = api(alice).post("/api/v1/jobs/", {"name": "j", "command": "x", "image": "registry.example.com/t/a:1"},
                         format="json")
    assert ok.status_code == 201, ok.json()


def test_an_image_allowed_in_another_pool_of_the_team_is_accepted_and_placed_only_there(alice, cluster):
    other = PoolFactory(name="research", allowed_images=["registry.example.com/"])
    other.teams.add(cluster["vision"])
    node = NodeFactory(name="node-research", pool=other)
    for i in range(2):
        GpuFactory(node=node, index=i, model=cluster["h100"], uuid=f"GPU-r-{i}")
    job = placed(alice, image="registry.example.com/vision/train:7", gpus=2)
    assert {a.node.name for a in job.allocations.all()} == {"node-research"}


def test_a_pool_that_stops_allowing_a_pending_jobs_image_leaves_it_pending_with_image_not_allowed(alice, cluster):
    job = job_submit(user=alice, name="j", command="x", gpu_model="h100-80gb", image="localhost/rota/torch:2.3")
    Pool.objects.filter(name="train").update(allowed_images=["registry.example.com/"])
    run_cycle()
    job.refresh_from_db()
    assert job.state == "pending" and not job.allocations.exists()
    assert job.pending_reason_code == "ImageNotAllowed"
    assert "image localhost/rota/torch:2.3 is not allowed in pool(s) train" in job.pending_reason_message
    Pool.objects.filter(name="train").update(allowed_images=["localhost/rota/torch"])
    run_cycle()
    job.refresh_from_db()
    assert job.state == "admitted"


# -- what a node says about an attempt's end ---------------------------------------------------------------------


def test_an_oom_killed_attempt_ends_failed_with_the_reason_and_the_limit(alice, cluster, node_client, api):
    client = node_client()
    register(client)
    job = placed(alice, memory_gb=1)
    event(client, job, type="started")
    response = event(client, job, type="exited", exit_code=137, signal=9, reason="OOMKilled",
                     message="memory limit of 1024 MiB reached")
    assert response.status_code == 200, response.json()
    assert job.state == "failed" and job.failure_class == "resource"
    assert (job.failure_reason, job.failure_message) == ("OOMKilled", "memory limit of 1024 MiB reached")
    body = api(alice).get(f"/api/v1/jobs/{job.pk}/").json()
    assert body["failure_reason"] == "OOMKilled" and body["failure_message"] == "memory limit of 1024 MiB reached"


def test_an_oom_killed_inference_service_is_not_restarted_into_the_same_limit(alice, cluster, node_client):
    client = node_client()
    register(client)
    job = placed(alice, kind="inference", memory_gb=1)
    event(client, job, type="started")
    event(client, job, type="exited", exit_code=137, signal=9, reason="OOMKilled", message="limit 1024 MiB")
    assert job.state == "failed" and job.failure_reason == "OOMKilled"


def test_an_image_that_cannot_be_pulled_fails_the_job_at_start_with_that_reason(alice, cluster, node_client):
    client = node_client()
    register(client)
    job = placed(alice, image="localhost/rota/missing:1")
    response = event(client, job, type="start_failed", reason="ImagePullFailed",
                     message="localhost/rota/missing:1: image not known")
    assert response.status_code == 200, response.json()
    assert job.state == "failed" and job.started_at is None
    assert (job.failure_reason, job.failure_class) == ("ImagePullFailed", "user")
    assert "ImagePullFailed: localhost/rota/missing:1: image not known" in job.transitions.last().cause


def test_an_unknown_failure_reason_is_refused_naming_the_field(alice, cluster, node_client):
    client = node_client()
    register(client)
    job = placed(alice)
    response = event(client, job, type="exited", exit_code=1, reason="Bored")
    assert response.status_code == 400 and "reason" in response.json()["errors"]
    assert job.state == "admitted"


# -- executors ---------------------------------------------------------------------------------------------------


def test_register_stores_the_nodes_executor(cluster, node_client, api, staff):
    assert register(node_client(), executor=CONTAINER).status_code == 200
    node = Node.objects.get(name="node-h100")
    assert node.executor == "container" and node.isolates_tenants
    assert node.executor_info == {"isolates": True, "runtime": "podman 4.3.1", "detail": "runc, cgroupfs"}
    listed = api(staff).get("/api/v1/nodes/?pool=train").json()["results"]
    assert next(n for n in listed if n["name"] == "node-h100")["executor"] == "container"


def test_a_process_executor_never_counts_as_isolating_whatever_it_says(cluster, node_client):
    register(node_client(), executor={**PROCESS, "isolates": True})
    node = Node.objects.get(name="node-h100")
    assert node.executor == "process" and not node.isolates_tenants


def test_where_isolation_is_required_a_process_node_is_refused_and_a_container_node_registers(
        cluster, node_client, settings):
    settings.ROTA_REQUIRE_ISOLATION = True
    node = Node.objects.get(name="node-h100")
    Node.objects.filter(pk=node.pk).update(state=Node.DOWN)
    for executor in (PROCESS, None):
        response = register(node_client(), **({"executor": executor} if executor else {}))
        assert response.status_code == 409 and response.json()["field"] == "executor"
        assert "does not isolate tenants" in response.json()["detail"]
        assert Node.objects.get(pk=node.pk).state == Node.DOWN
    assert register(node_client(), executor=CONTAINER).status_code == 200
    assert Node.objects.get(pk=node.pk).state == Node.READY


def test_a_process_node_is_sent_back_to_register_once_isolation_becomes_required(cluster, node_client, settings):
    client = node_client()
    register(client, executor=PROCESS)
    assert client.post("/api/v1/node/heartbeat/", {"seq": 1}, format="json").status_code == 200
    settings.ROTA_REQUIRE_ISOLATION = True
    response = client.post("/api/v1/node/heartbeat/", {"seq": 2}, format="json")
    assert response.status_code == 409 and response.json()["detail"] == "register"


# -- what people see ---------------------------------------------------------------------------------------------


def test_the_job_page_says_how_it_runs_image_identity_limits_executor_and_failure(alice, cluster, node_client,
                                                                                  client):
    node_api = node_client()
    register(node_api, executor=CONTAINER)
    job = placed(alice, image="localhost/rota/torch:2.3", cpus=4, memory_gb=2)
    client.force_login(alice)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    uid = cluster["vision"].unix_id
    assert "How it runs" in page and "<code>localhost/rota/torch:2.3</code>" in page
    assert f"uid {uid}, gid {uid} (team vision)" in page
    assert "4 CPUs" in page and "2048 MiB" in page and "at most 4096" in page
    assert "container (podman 4.3.1) — isolates tenants" in page
    event(node_api, job, type="started")
    event(node_api, job, type="exited", exit_code=137, signal=9, reason="OOMKilled", message="limit 2048 MiB")
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "OOMKilled</span> limit 2048 MiB" in page


def test_the_job_api_says_how_it_runs_as_the_page_does(alice, cluster, node_client):
    register(node_client(), executor=CONTAINER)
    job = placed(alice, image="localhost/rota/torch:2.3", cpus=4, memory_gb=2)
    api = APIClient()
    api.force_authenticate(alice)
    runs = api.get(f"/api/v1/jobs/{job.pk}/").json()["runs"]
    uid = cluster["vision"].unix_id
    assert runs["image"] == "localhost/rota/torch:2.3"
    assert runs["run_as"] == {"uid": uid, "gid": uid, "team": "vision"}
    assert runs["limits"] == {"cpus": 4, "memory_mb": 2048, "pids": 4096}
    assert runs["executors"] == [{"node": "node-h100", "executor": "container", "isolates": True,
                                  "runtime": "podman 4.3.1"}]


def test_the_cluster_page_marks_a_node_that_does_not_isolate_tenants(alice, cluster, node_client, client):
    register(node_client(), executor=PROCESS)
    register(node_client(cluster["nodes"][1]), hostname="node-a100", executor=CONTAINER,
             gpus=[{"index": 0, "uuid": "GPU-a100-0", "model": "a100-40gb", "memory_mb": 40960}])
    client.force_login(alice)
    page = client.get("/cluster/").content.decode()
    assert page.count("does NOT isolate tenants") == 1
    process_card = page[page.index("<h2>node-h100</h2>"):]
    assert "process executor — does NOT isolate tenants" in process_card[:2000]
    assert "container (podman 4.3.1) — isolates tenants" in page


def test_a_gang_whose_member_is_oom_killed_ends_failed_with_the_reason_once_the_others_stop(alice, cluster,
                                                                                           node_client):
    second = NodeFactory(name="node-h100-b", pool=cluster["pool"])
    for i in range(4):
        GpuFactory(node=second, index=i, model=cluster["h100"], uuid=f"GPU-h100-b-{i}")
    first_api, second_api = node_client(), node_client(second)
    job = placed(alice, gpus=4, nodes=2, memory_gb=2)
    for api_ in (first_api, second_api):
        event(api_, job, type="started")
    event(first_api, job, type="exited", exit_code=137, signal=9, reason="OOMKilled", message="limit 1024 MiB")
    assert job.state == "running" and job.stop_reason == "gang-exit"  # the other member is told to stop
    event(second_api, job, type="stopped", exit_code=143, signal=15, message="stopped by the portal")
    assert job.state == "failed" and job.failure_class == "resource"
    assert (job.failure_reason, job.failure_message) == ("OOMKilled", "limit 1024 MiB")


def test_a_requeued_attempt_keeps_no_failure_reason_of_the_last_one(alice, cluster, node_client):
    second = NodeFactory(name="node-h100-b", pool=cluster["pool"])
    for i in range(4):
        GpuFactory(node=second, index=i, model=cluster["h100"], uuid=f"GPU-h100-b-{i}")
    first_api, second_api = node_client(), node_client(second)
    job = placed(alice, gpus=4, nodes=2)
    Job.objects.filter(pk=job.pk).update(stop_reason="preempt")  # asked to stop for a preemption
    event(first_api, job, type="exited", exit_code=137, signal=9, reason="OOMKilled", message="limit")
    event(second_api, job, type="stopped", exit_code=143, signal=15)
    assert job.state == "pending" and job.attempt == 2
    assert (job.failure_reason, job.failure_message) == ("", "")


SLURM_AS_TEAMS = {"name": "slurm", "isolates": True, "runtime": "slurm 22.05", "detail": "sbatch --uid"}


def test_where_isolation_is_required_a_slurm_node_registers_only_when_its_jobs_run_as_team_uids(
        cluster, node_client, settings):
    settings.ROTA_REQUIRE_ISOLATION = True
    node = Node.objects.get(name="node-h100")
    response = register(node_client(), executor={**SLURM_AS_TEAMS, "isolates": False})
    assert response.status_code == 409 and response.json()["field"] == "executor"
    assert "run the Slurm bridge as root so that sbatch runs each job as its team's uid" in response.json()["detail"]
    assert register(node_client(), executor=SLURM_AS_TEAMS).status_code == 200
    node.refresh_from_db()
    assert (node.executor, node.isolates_tenants) == ("slurm", True)
