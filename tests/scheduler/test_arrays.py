"""Job arrays: one submission of many tasks, a cap on tasks running at once, shown and cancelled as one."""

import pytest
from django.core.exceptions import ValidationError

from scheduler.cycle import run_cycle
from scheduler.models import Job, JobArray
from scheduler.services.arrays import MAX_ARRAY_TASKS, array_spec_parse, array_submit
from scheduler.services.nodes import node_assignments

pytestmark = pytest.mark.django_db

TASK = {"name": "sweep", "command": "python train.py --seed $ROTA_ARRAY_INDEX", "gpu_model": "h100-80gb"}


def node_event(client, job, type_, **event):
    job.refresh_from_db()
    client.post(f"/api/v1/node/jobs/{job.pk}/events/", {"attempt": job.attempt, "type": type_, **event},
                format="json")
    job.refresh_from_db()
    return job


@pytest.mark.parametrize("text, indices, cap", [
    ("0-3", (0, 1, 2, 3), None),
    ("0-99%8", tuple(range(100)), 8),
    ("1,3,5", (1, 3, 5), None),
    ("0-6:2,9", (0, 2, 4, 6, 9), None),
    (" 4 ", (4,), None),
    ("2,2,1-2%1", (1, 2), 1),
])
def test_it_reads_slurm_array_specs(text, indices, cap):
    spec = array_spec_parse(text)
    assert spec.indices == indices and spec.max_running == cap


@pytest.mark.parametrize("text, says", [
    ("", "must not be empty"),
    ("5-1", "runs backwards"),
    ("0-9%0", "at least 1"),
    ("0-9%x", "at least 1"),
    ("a-b", "cannot read 'a-b'"),
    ("0-5:0", "step must be at least 1"),
    ("0-100000", "at most 99999"),
    (f"0-{MAX_ARRAY_TASKS}", f"at most {MAX_ARRAY_TASKS} tasks"),
])
def test_a_bad_array_spec_is_refused_naming_the_field_and_the_rule(text, says):
    with pytest.raises(ValidationError) as exc:
        array_spec_parse(text)
    message = exc.value.message_dict["array"][0]
    assert says in message and '"0-99%8"' in message


def test_an_array_submitted_through_the_api_is_one_job_per_index(alice, api):
    resp = api(alice).post("/api/v1/jobs/", {**TASK, "array": "0-7%2"}, format="json")
    assert resp.status_code == 201, resp.json()
    body = resp.json()
    assert body["size"] == 8 and body["max_running"] == 2 and body["spec"] == "0-7%2"
    assert len(body["ids"]) == 8 and body["counts"] == {"pending": 8}
    listed = api(alice).get("/api/v1/jobs/", {"array_id": body["array_id"]}).json()
    assert listed["count"] == 8
    assert sorted(j["array_index"] for j in listed["results"]) == list(range(8))
    assert {j["array_id"] for j in listed["results"]} == {body["array_id"]}
    assert api(alice).get(f"/api/v1/arrays/{body['array_id']}/").json()["counts"] == {"pending": 8}


def test_a_bad_array_writes_nothing_and_names_every_bad_field(alice, api):
    resp = api(alice).post("/api/v1/jobs/", {**TASK, "array": "9-1", "gpu_model": "tpu"}, format="json")
    assert resp.status_code == 400
    assert set(resp.json()["errors"]) == {"array", "gpu_model"}
    assert not JobArray.objects.exists() and not Job.objects.exists()


def test_an_outsider_neither_sees_nor_cancels_nor_lists_an_array(alice, charlie, api):
    job_array = array_submit(user=alice, array="0-3", **TASK)
    assert api(charlie).get(f"/api/v1/arrays/{job_array.pk}/").status_code == 404
    assert api(charlie).post(f"/api/v1/arrays/{job_array.pk}/cancel/").status_code == 404
    resp = api(charlie).get("/api/v1/jobs/", {"array_id": job_array.pk})
    assert resp.status_code == 400 and "array_id" in resp.json()["errors"]
    assert Job.objects.filter(array=job_array, state="pending").count() == 4


def test_an_array_capped_at_two_never_runs_more_than_two_tasks_at_once(alice, node_client):
    client = node_client()
    job_array = array_submit(user=alice, array="0-7%2", **TASK)  # vision may hold 4 H100s: the cap binds
    run_cycle()
    tasks = list(job_array.tasks.order_by("array_index"))
    assert [t.state for t in tasks] == ["admitted"] * 2 + ["pending"] * 6
    waiting = tasks[2]
    assert waiting.pending_reason_code == "JobArrayTaskLimit"
    assert waiting.pending_reason_message == (
        f"array {job_array.pk} runs at most 2 tasks at once; its next task starts when one of them ends")
    assert waiting.queue_position is None
    finished = 0
    while finished < 8:
        holding = list(job_array.tasks.filter(state__in=["admitted", "starting", "running"]))
        assert 1 <= len(holding) <= 2
        node_event(client, holding[0], "started")
        node_event(client, holding[0], "exited", exit_code=0)
        finished += 1
        run_cycle()
    assert set(job_array.tasks.values_list("state", flat=True)) == {"succeeded"}


def test_each_task_runs_with_its_array_id_and_index(alice, cluster):
    job_array = array_submit(user=alice, array="3,5", **TASK)
    run_cycle()
    envs = {e["env"]["ROTA_ARRAY_INDEX"]: e["env"] for e in node_assignments(cluster["nodes"][0])}
    assert set(envs) == {"3", "5"}
    assert {env["ROTA_ARRAY_ID"] for env in envs.values()} == {str(job_array.pk)}


def test_cancelling_an_array_ends_waiting_tasks_and_stops_running_ones(alice, bob, api):
    job_array = array_submit(user=alice, array="0-5%2", **TASK)
    run_cycle()
    assert api(bob).post(f"/api/v1/arrays/{job_array.pk}/cancel/").status_code == 403  # a team-mate sees only
    resp = api(alice).post(f"/api/v1/arrays/{job_array.pk}/cancel/")
    assert resp.status_code == 200 and resp.json()["cancelled"] == 6
    assert resp.json()["counts"] == {"cancelled": 4, "admitted": 2}
    holding = job_array.tasks.filter(state="admitted")
    assert set(holding.values_list("stop_reason", flat=True)) == {"cancel"}
