"""The node API: a node registers, heartbeats, gets its assignments and reports only about itself."""

from datetime import timedelta

import pytest

from scheduler.cycle import run_cycle
from scheduler.models import Allocation, Gpu, Job, Node, NodeToken
from scheduler.services.jobs import job_cancel, job_submit
from scheduler.services.node_jobs import nodes_check_liveness

pytestmark = pytest.mark.django_db

H100_REPORT = {
    "hostname": "node-h100", "gpu_backend": "fake", "driver_version": "550.54.15", "cuda_version": "12.4",
    "cpus": 64, "memory_mb": 512000,
    "gpus": [{"index": i, "uuid": f"GPU-h100-{i}", "model": "h100-80gb", "memory_mb": 81559} for i in range(4)],
}


def admitted_job(user, **kw):
    job = job_submit(user=user, name="j", command="echo hi", gpu_model="h100-80gb", **kw)
    run_cycle()
    job.refresh_from_db()
    assert job.state == "admitted"
    return job


def beat(client, seq, **body):
    return client.post("/api/v1/node/heartbeat/", {"seq": seq, **body}, format="json")


def test_register_records_the_hosts_gpus_and_makes_a_down_node_ready(cluster, node_client):
    node = cluster["nodes"][0]
    Node.objects.filter(pk=node.pk).update(state=Node.DOWN)
    response = node_client(node).post("/api/v1/node/register/", H100_REPORT, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["node"] == "node-h100"
    node.refresh_from_db()
    assert node.state == Node.READY and node.driver_version == "550.54.15" and node.cpus == 64


def test_register_and_heartbeat_answers_name_the_node_control_server_where_the_site_has_one(
        cluster, node_client, settings):
    node = cluster["nodes"][0]
    answer = node_client(node).post("/api/v1/node/register/", H100_REPORT, format="json").json()
    assert "heartbeat_url" not in answer  # none: the agent heartbeats where it registered
    assert "heartbeat_url" not in beat(node_client(node), 1).json()
    settings.ROTA_NODE_HEARTBEAT_URL = "http://10.0.0.5:8002"
    answer = node_client(node).post("/api/v1/node/register/", H100_REPORT, format="json").json()
    assert answer["heartbeat_url"] == "http://10.0.0.5:8002"
    assert beat(node_client(node), 1).json()["heartbeat_url"] == "http://10.0.0.5:8002"  # followed: the latest says


def test_a_node_reporting_another_nodes_gpus_is_told_whose_they_are_and_for_a_fake_node_what_to_do(
        cluster, node_client):
    from tests.factories import NodeFactory

    report = {**H100_REPORT, "gpus": [{**H100_REPORT["gpus"][0], "index": i, "uuid": f"GPU-h100-{i}"}
                                      for i in range(6)]}
    assert node_client().post("/api/v1/node/register/", report, format="json").status_code == 200
    copy = NodeFactory(name="gpu-h100-07", pool=cluster["pool"])
    response = node_client(copy).post("/api/v1/node/register/", report, format="json")  # the same six UUIDs
    body = response.json()
    assert response.status_code == 400 and body["field"] == "gpus", body
    assert body["detail"].startswith("6 reported GPU UUID(s) belong to node node-h100 (GPU-h100-0, ")
    assert "and 2 more)" in body["detail"]
    assert body["detail"].endswith("start this agent with --hostname gpu-h100-07")
    assert not Gpu.objects.filter(node=copy).exists()


def test_a_node_returning_with_fewer_gpus_is_drained_with_a_reason(cluster, node_client):
    node = cluster["nodes"][0]
    report = {**H100_REPORT, "gpus": H100_REPORT["gpus"][:3]}
    node_client(node).post("/api/v1/node/register/", report, format="json")
    node.refresh_from_db()
    assert node.state == Node.DRAINING and "fewer GPUs" in node.state_reason
    assert Gpu.objects.get(node=node, index=3).present is False


def test_heartbeats_must_increase_and_return_the_nodes_assignments(alice, cluster, node_client):
    client = node_client()
    client.post("/api/v1/node/register/", H100_REPORT, format="json")
    job = admitted_job(alice, gpus=2)
    response = beat(client, 1)
    assert response.status_code == 200
    [assignment] = response.json()["assignments"]
    assert assignment["job_id"] == job.pk and assignment["desired"] == "running"
    assert [g["index"] for g in assignment["gpus"]] == [0, 1]
    assert assignment["command"] == "echo hi"
    job.refresh_from_db()
    assert job.state == "starting"
    replay = beat(client, 1)
    assert replay.status_code == 409 and replay.json()["field"] == "seq"


def test_a_fraction_of_a_gpu_tells_the_job_its_share_and_memory_limit(alice, cluster, node_client):
    client = node_client()
    client.post("/api/v1/node/register/", H100_REPORT, format="json")
    whole = admitted_job(alice, gpus=1)
    part = admitted_job(alice, gpus=1, gpu_fraction="0.25", gpu_memory_gb=10)
    env = {a["job_id"]: a["env"] for a in beat(client, 1).json()["assignments"]}
    assert env[part.pk]["ROTA_GPU_FRACTION"] == "0.25"
    assert env[part.pk]["ROTA_GPU_MEMORY_LIMIT_MB"] == str(int(0.25 * 81559))  # a quarter of the card
    assert "ROTA_GPU_FRACTION" not in env[whole.pk] and "ROTA_GPU_MEMORY_LIMIT_MB" not in env[whole.pk]


def test_a_job_runs_then_succeeds_and_its_gpus_are_released_only_then(alice, cluster, node_client):
    client = node_client()
    job = admitted_job(alice)
    url = f"/api/v1/node/jobs/{job.pk}/events/"
    assert client.post(url, {"attempt": 1, "type": "started", "pid": 42}, format="json").json()["state"] == "running"
    assert Allocation.objects.filter(job=job, ended_at__isnull=True).count() == 1
    log = client.post(f"/api/v1/node/jobs/{job.pk}/log/", {"attempt": 1, "offset": 0, "data": "hi\n"}, format="json")
    assert log.json()["size"] == 3
    dup = client.post(f"/api/v1/node/jobs/{job.pk}/log/", {"attempt": 1, "offset": 0, "data": "hi\n"}, format="json")
    assert dup.json()["size"] == 3
    done = client.post(url, {"attempt": 1, "type": "exited", "exit_code": 0}, format="json")
    assert done.json()["state"] == "succeeded"
    assert not Allocation.objects.filter(job=job, ended_at__isnull=True).exists()
    job.refresh_from_db()
    assert job.exit_code == 0 and job.logs.get(attempt=1).content == "hi\n"


def test_a_nonzero_exit_fails_the_job_as_a_user_failure(alice, node_client):
    client = node_client()
    job = admitted_job(alice)
    client.post(f"/api/v1/node/jobs/{job.pk}/events/", {"attempt": 1, "type": "started"}, format="json")
    client.post(f"/api/v1/node/jobs/{job.pk}/events/", {"attempt": 1, "type": "exited", "exit_code": 3},
                format="json")
    job.refresh_from_db()
    assert job.state == "failed" and job.exit_code == 3 and job.failure_class == "user"


def test_cancelling_a_running_job_asks_its_node_to_stop_it_and_frees_gpus_on_confirmation(alice, node_client):
    client = node_client()
    job = admitted_job(alice)
    client.post(f"/api/v1/node/jobs/{job.pk}/events/", {"attempt": 1, "type": "started"}, format="json")
    job_cancel(user=alice, job=job)
    [assignment] = beat(client, 1).json()["assignments"]
    assert assignment["desired"] == "stopped"
    assert Allocation.objects.filter(job=job, ended_at__isnull=True).exists()
    client.post(f"/api/v1/node/jobs/{job.pk}/events/", {"attempt": 1, "type": "exited", "signal": 15},
                format="json")
    job.refresh_from_db()
    assert job.state == "cancelled"
    assert not Allocation.objects.filter(job=job, ended_at__isnull=True).exists()


def test_a_node_may_not_report_about_a_job_on_another_node(alice, cluster, node_client):
    job = admitted_job(alice)
    other = node_client(cluster["nodes"][1])
    response = other.post(f"/api/v1/node/jobs/{job.pk}/events/", {"attempt": 1, "type": "exited", "exit_code": 0},
                          format="json")
    assert response.status_code == 404
    log = other.post(f"/api/v1/node/jobs/{job.pk}/log/", {"attempt": 1, "offset": 0, "data": "x"}, format="json")
    assert log.status_code == 404
    job.refresh_from_db()
    assert job.state == "admitted"


def test_an_event_for_an_old_attempt_is_refused(alice, node_client):
    job = admitted_job(alice)
    response = node_client().post(f"/api/v1/node/jobs/{job.pk}/events/", {"attempt": 7, "type": "started"},
                                  format="json")
    assert response.status_code == 409 and response.json()["field"] == "attempt"


def test_malformed_reports_are_refused_with_the_field_named(cluster, node_client):
    client = node_client()
    bad = {**H100_REPORT, "gpus": [{"index": 0, "uuid": "a", "model": "x", "memory_mb": -1}]}
    response = client.post("/api/v1/node/register/", bad, format="json")
    assert response.status_code == 400 and "gpus" in response.json()["errors"]
    response = client.post("/api/v1/node/heartbeat/", {"seq": "soon"}, format="json")
    assert response.status_code == 400 and "seq" in response.json()["errors"]


def test_a_revoked_or_unknown_token_is_refused(cluster, api):
    node = cluster["nodes"][0]
    token, raw = NodeToken.issue(node)
    token.revoked_at = token.created_at
    token.save()
    client = api()
    client.credentials(HTTP_AUTHORIZATION=f"Node {raw}")
    assert client.post("/api/v1/node/heartbeat/", {"seq": 1}, format="json").status_code == 401
    client.credentials(HTTP_AUTHORIZATION="Node rn_not-a-token")
    assert client.post("/api/v1/node/heartbeat/", {"seq": 1}, format="json").status_code == 401


def test_nodes_cannot_reach_user_endpoints_and_users_cannot_reach_node_endpoints(alice, api, node_client):
    node = node_client()
    assert node.get("/api/v1/jobs/").status_code in (401, 403)
    assert node.post("/api/v1/jobs/", {"name": "x", "command": "y"}, format="json").status_code in (401, 403)
    assert api(alice).post("/api/v1/node/heartbeat/", {"seq": 1}, format="json").status_code in (401, 403)


def test_a_silent_node_goes_down_and_its_jobs_are_requeued(alice, cluster, node_client, settings):
    client = node_client()
    client.post("/api/v1/node/register/", H100_REPORT, format="json")
    job = admitted_job(alice)
    node = cluster["nodes"][0]
    Node.objects.filter(pk=node.pk).update(last_heartbeat_at=job.admitted_at - timedelta(hours=1))
    assert nodes_check_liveness() == ["node-h100"]
    node.refresh_from_db()
    job.refresh_from_db()
    assert node.state == Node.DOWN
    assert job.state == "pending" and job.attempt == 2
    assert not Allocation.objects.filter(job=job, ended_at__isnull=True).exists()
    assert beat(client, 5).status_code == 409


def test_each_member_of_a_multi_node_gang_learns_its_peers_and_rank(alice, cluster, node_client):
    from tests.factories import GpuFactory, NodeFactory

    second = NodeFactory(name="node-h100-b", pool=cluster["pool"])
    for i in range(4):
        GpuFactory(node=second, index=i, model=cluster["h100"], uuid=f"GPU-h100-b{i}")
    job = job_submit(user=alice, name="gang", command="torchrun train.py", gpu_model="h100-80gb", gpus=4, nodes=2)
    run_cycle()
    job.refresh_from_db()
    assert job.state == "admitted", job.pending_reason_message
    envs = {}
    for node, seq in ((cluster["nodes"][0], 1), (second, 1)):
        [assignment] = beat(node_client(node), seq).json()["assignments"]
        assert len(assignment["gpus"]) == 2
        envs[node.name] = assignment["env"]
    assert {e["ROTA_NODES"] for e in envs.values()} == {"node-h100,node-h100-b"}
    assert envs["node-h100"]["ROTA_NODE_RANK"] == "0" and envs["node-h100-b"]["ROTA_NODE_RANK"] == "1"
    assert envs["node-h100-b"]["ROTA_MASTER_ADDR"] == "node-h100"


def test_when_one_gang_member_exits_the_others_are_stopped_and_the_job_ends_once(alice, cluster, node_client):
    from tests.factories import GpuFactory, NodeFactory

    second = NodeFactory(name="node-h100-b", pool=cluster["pool"])
    for i in range(4):
        GpuFactory(node=second, index=i, model=cluster["h100"], uuid=f"GPU-h100-b{i}")
    job = job_submit(user=alice, name="gang", command="x", gpu_model="h100-80gb", gpus=4, nodes=2)
    run_cycle()
    a, b = node_client(cluster["nodes"][0]), node_client(second)
    for client in (a, b):
        client.post(f"/api/v1/node/jobs/{job.pk}/events/", {"attempt": 1, "type": "started"}, format="json")
    a.post(f"/api/v1/node/jobs/{job.pk}/events/", {"attempt": 1, "type": "exited", "exit_code": 3}, format="json")
    job.refresh_from_db()
    assert job.state == "running" and job.stop_reason == "gang-exit"
    [assignment] = beat(b, 1).json()["assignments"]
    assert assignment["desired"] == "stopped"
    b.post(f"/api/v1/node/jobs/{job.pk}/events/", {"attempt": 1, "type": "exited", "signal": 15}, format="json")
    job.refresh_from_db()
    assert job.state == "failed" and job.exit_code == 3
    assert not Allocation.objects.filter(job=job, ended_at__isnull=True).exists()


def test_a_job_admitted_while_a_heartbeat_is_answered_waits_for_the_next_one_and_never_reaches_a_node_admitted(
        alice, cluster, node_client, monkeypatch):
    """A cycle may commit an admission while a heartbeat is answered: the node is told only of jobs marked
    "starting" (the agent may report one running before its next beat); the late one comes next beat."""
    from scheduler.services import nodes

    client = node_client()
    client.post("/api/v1/node/register/", H100_REPORT, format="json")
    first = admitted_job(alice, gpus=1)
    real = nodes.node_assignments
    late = []

    def cycle_commits_meanwhile(node, **kw):
        if not late:
            late.append(admitted_job(alice, gpus=1))
        return real(node, **kw)

    monkeypatch.setattr(nodes, "node_assignments", cycle_commits_meanwhile)
    told = {a["job_id"] for a in beat(client, 1).json()["assignments"]}
    assert told == {first.pk}
    assert dict(Job.objects.filter(pk__in=[first.pk, late[0].pk]).values_list("pk", "state")) == {
        first.pk: "starting", late[0].pk: "admitted"}
    told = {a["job_id"]: a["desired"] for a in beat(client, 2).json()["assignments"]}
    assert told == {first.pk: "running", late[0].pk: "running"}
    assert Job.objects.get(pk=late[0].pk).state == "starting"


def test_a_job_preempted_while_a_heartbeat_waits_for_its_row_is_told_to_stop(alice, cluster, node_client,
                                                                              monkeypatch):
    """The cycle holds a victim's row while it asks it to stop; the heartbeat waits, then reads what the
    cycle wrote: the node is told "stopped", never to start a job that is already being preempted."""
    from scheduler.services import nodes

    client = node_client()
    client.post("/api/v1/node/register/", H100_REPORT, format="json")
    job = admitted_job(alice, gpus=1)
    real = nodes.jobs_transition_locked

    def cycle_preempts_first(job_ids, **kw):
        Job.objects.filter(pk__in=job_ids).update(stop_reason="preempt")  # what the cycle committed meanwhile
        return real(job_ids, **kw)

    monkeypatch.setattr(nodes, "jobs_transition_locked", cycle_preempts_first)
    [assignment] = beat(client, 1).json()["assignments"]
    assert assignment["job_id"] == job.pk and assignment["desired"] == "stopped"
    assert assignment["stop_reason"] == "preempt"


def test_a_started_event_records_the_address_the_service_listens_on_and_refuses_a_malformed_one(
    alice, node_client
):
    client = node_client()
    job = admitted_job(alice)
    url = f"/api/v1/node/jobs/{job.pk}/events/"
    bad = client.post(url, {"attempt": 1, "type": "started", "address": "10.0.0.5; rm -rf /"}, format="json")
    assert bad.status_code == 400 and "address" in bad.json()["errors"]
    job.refresh_from_db()
    assert job.state == "admitted" and job.service_address == ""
    assert client.post(url, {"attempt": 1, "type": "started", "address": "10.0.0.5:30001"},
                       format="json").status_code == 200
    job.refresh_from_db()
    assert job.state == "running" and job.service_address == "10.0.0.5:30001"
