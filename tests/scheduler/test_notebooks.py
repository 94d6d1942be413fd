"""Notebooks on the portal side (scheduler.notebooks): a blank command runs JupyterLab in the notebook image;
each admitted attempt gets a random token, stored encrypted and sent only to its node; the job page links to
the portal's proxy; idle reclaim counts the server's own last activity beside the GPUs'."""

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from scheduler import notebooks
from scheduler.cycle import run_cycle
from scheduler.kinds import NOTEBOOK_COMMAND
from scheduler.models import GpuSample, Job, NotebookServer
from scheduler.services.common import db_now
from scheduler.services.jobs import job_submit
from tests.scheduler.test_lifecycle import end, started

pytestmark = pytest.mark.django_db


def assignment_of(client, job) -> dict:
    answer = client.post("/api/v1/node/heartbeat/", {"seq": 1}, format="json").json()
    return next(a for a in answer["assignments"] if a["job_id"] == job.pk)


def test_a_notebook_without_a_command_runs_jupyterlab_in_the_notebook_image(alice, node_client, settings):
    job = job_submit(user=alice, name="lab", command="", kind="notebook", gpu_model="h100-80gb")
    assert job.command == NOTEBOOK_COMMAND and "JUPYTER_TOKEN" not in job.command
    run_cycle()
    assignment = assignment_of(node_client(), job)
    assert assignment["image"] == settings.ROTA_NOTEBOOK_IMAGE == "localhost/rota/notebook:1"
    with pytest.raises(ValidationError) as refused:
        job_submit(user=alice, name="train", command="  ", kind="training", gpu_model="h100-80gb")
    assert refused.value.message_dict["command"] == ["must not be empty"]


def test_each_attempt_gets_its_own_token_stored_encrypted_and_told_to_its_node_only(alice, node_client, api):
    client = node_client()
    job = started(alice, client, kind="notebook", max_retries=1, retry_on=["failed"])
    server = NotebookServer.objects.get(job=job)
    token = notebooks.token_decrypt(server)
    assert server.attempt == job.attempt and len(token) >= 40 and token not in server.token_encrypted
    env = assignment_of(client, job)["env"]
    assert env["JUPYTER_TOKEN"] == token and env["ROTA_NOTEBOOK_BASE_URL"] == f"/notebooks/{job.pk}/"
    assert token not in api(alice).get(f"/api/v1/jobs/{job.pk}/").content.decode()
    job = end(client, job, exit_code=1)  # retried: a new attempt
    Job.objects.filter(pk=job.pk).update(not_before=None)
    run_cycle()
    job.refresh_from_db()
    server.refresh_from_db()
    assert job.state == "admitted" and server.attempt == job.attempt
    assert notebooks.token_decrypt(server) != token


def test_the_job_page_opens_the_notebook_through_the_portal_not_the_node(alice, node_client):
    job = started(alice, node_client(), kind="notebook")
    page = Client()
    page.force_login(alice)
    html = page.get(f"/jobs/{job.pk}/").content.decode()
    assert f'<a id="open-notebook" href="/notebooks/{job.pk}/">Open notebook</a>' in html
    assert "node-h100:30000" not in html


def idle_gpus(job, now):
    alloc = job.allocations.get()
    for minute in range(0, 12, 2):
        GpuSample.objects.create(gpu=alloc.gpu, node=alloc.node, job=job, at=now - timedelta(minutes=minute),
                                 util_pct=1.0)


def test_idle_reclaim_spares_a_notebook_its_server_reports_active_and_takes_one_it_reports_idle(
    alice, node_client
):
    client = node_client()
    now = db_now()
    working, idle = (started(alice, client, kind="notebook", idle_timeout_minutes=10) for _ in range(2))
    Job.objects.filter(pk__in=[working.pk, idle.pk]).update(started_at=now - timedelta(minutes=30))
    for job in (working, idle):
        idle_gpus(job, now)
    NotebookServer.objects.filter(job=working).update(last_activity=now - timedelta(minutes=3), probed_at=now)
    NotebookServer.objects.filter(job=idle).update(last_activity=now - timedelta(minutes=25), probed_at=now)
    assert run_cycle().reclaimed == 1
    stops = dict(Job.objects.filter(pk__in=[working.pk, idle.pk]).values_list("pk", "stop_reason"))
    assert stops == {working.pk: "", idle.pk: "idle"}
    # A report probed too long ago is not trusted: the GPUs alone decide, as for a server that never answered.
    NotebookServer.objects.filter(job=working).update(probed_at=now - timedelta(minutes=20))
    assert run_cycle().reclaimed == 1
    assert Job.objects.get(pk=working.pk).stop_reason == "idle"
