"""End to end with the container executor: API -> PostgreSQL -> Celery worker -> scheduling cycle -> a real
node agent (``--executor container``, root, Podman) -> a job in its image as its team's uid, with cgroup
limits -> its output, its limits and its failure reason back in the portal. The auditor is clean after each."""

import subprocess

import pytest
from django.test import Client
from rest_framework.test import APIClient

from scheduler.audit import audit
from scheduler.models import Job, Node
from tests.processes import ROOT, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="session")
def images():
    """The local demo images (``scripts/build-images.sh``; Podman must be installed: fails, not skips)."""
    subprocess.run([str(ROOT / "scripts" / "build-images.sh")], check=True, cwd=ROOT, timeout=600)


@pytest.fixture
def container_node(cluster, celery_worker, start_agent, settings, images):
    """node-h100 with a real agent on the container executor, registered and heartbeating every second."""
    settings.ROTA_NODE_HEARTBEAT_INTERVAL_S = 1
    node = cluster["nodes"][0]
    start_agent(node, executor="container")
    wait_for(lambda: Node.objects.get(pk=node.pk).registered_at, timeout=30, what="the agent to register")
    return node


def submit(user, **fields) -> int:
    client = APIClient()
    client.force_authenticate(user)
    response = client.post("/api/v1/jobs/", {"gpu_model": "h100-80gb", **fields}, format="json")
    assert response.status_code == 201, response.json()
    return response.json()["id"]


def job_state(job_id):
    return Job.objects.filter(pk=job_id).values_list("state", flat=True).first()


def test_a_python_job_runs_in_its_image_as_its_team_uid_and_the_portal_shows_how(alice, cluster, container_node):
    job_id = submit(alice, name="hello", image="localhost/rota/python:3.11", memory_gb=2,
                    command="python3 -c \"import os, sys; print('uid', os.getuid(), sys.version_info[:2])\"")
    wait_for(lambda: job_state(job_id) in ("succeeded", "failed"), timeout=60, what="the job to finish")
    job = Job.objects.get(pk=job_id)
    assert (job.state, job.exit_code, job.failure_reason) == ("succeeded", 0, "")
    uid = cluster["vision"].unix_id
    api = APIClient()
    api.force_authenticate(alice)
    assert api.get(f"/api/v1/jobs/{job_id}/logs/").json()["content"] == f"uid {uid} (3, 11)\n"
    detail = api.get(f"/api/v1/jobs/{job_id}/").json()
    assert detail["image"] == detail["runs"]["image"] == "localhost/rota/python:3.11"
    assert detail["runs"]["run_as"] == {"uid": uid, "gid": uid, "team": "vision"}
    assert detail["runs"]["limits"]["memory_mb"] == 2048 and detail["runs"]["limits"]["pids"] == 4096
    assert detail["runs"]["executors"][0]["executor"] == "container" and detail["runs"]["executors"][0]["isolates"]

    page = Client()
    page.force_login(alice)
    html = page.get(f"/jobs/{job_id}/").content.decode()
    assert "<code>localhost/rota/python:3.11</code>" in html
    assert f"uid {uid}, gid {uid} (team vision)" in html
    assert "2048 MiB" in html and "at most 4096" in html
    assert "container" in html and "isolates tenants" in html
    assert audit() == []


def test_a_job_over_its_memory_limit_ends_oomkilled_while_its_neighbour_keeps_running(alice, container_node):
    neighbour = submit(alice, name="neighbour", memory_gb=1, command="echo up; sleep 300")
    wait_for(lambda: job_state(neighbour) == "running", timeout=60, what="the neighbour to run")
    hog = submit(alice, name="hog", memory_gb=1,
                 command="python3 -c \"b = b'x' * (3 * 1024 ** 3); print('never')\"")
    wait_for(lambda: job_state(hog) in ("succeeded", "failed"), timeout=90, what="the hog to end")
    job = Job.objects.get(pk=hog)
    assert (job.state, job.failure_reason) == ("failed", "OOMKilled"), (job.state, job.failure_message)
    assert job_state(neighbour) == "running"
    api = APIClient()
    api.force_authenticate(alice)
    assert "never" not in api.get(f"/api/v1/jobs/{hog}/logs/").json()["content"]
    assert api.get(f"/api/v1/jobs/{hog}/").json()["failure_reason"] == "OOMKilled"
    assert api.post(f"/api/v1/jobs/{neighbour}/cancel/").status_code == 200
    wait_for(lambda: job_state(neighbour) == "cancelled", timeout=60, what="the neighbour to be cancelled")
    assert audit() == []


def test_an_allowed_image_that_does_not_exist_ends_image_pull_failed(alice, container_node):
    job_id = submit(alice, name="ghost", image="localhost/rota/no-such-image:1", command="echo never")
    wait_for(lambda: job_state(job_id) in ("succeeded", "failed"), timeout=90, what="the job to end")
    job = Job.objects.get(pk=job_id)
    assert (job.state, job.failure_reason) == ("failed", "ImagePullFailed"), job.failure_message
    assert "localhost/rota/no-such-image:1" in job.failure_message
    assert audit() == []
