"""Dependencies (Slurm's afterok / afternotok / afterany): a job waits for others with ``Dependency``, starts
once they ended as asked, and ends with ``DependencyNeverSatisfied`` when that can no longer happen."""

import pytest
from django.core.exceptions import ValidationError

from scheduler.cycle import run_cycle
from scheduler.dependencies import MET, NEVER, WAITING, dependency_status
from scheduler.models import Job, JobDependency
from scheduler.services.arrays import array_submit
from scheduler.services.dependencies import dependency_parse
from scheduler.services.jobs import job_submit

pytestmark = pytest.mark.django_db

JOB = {"command": "true", "gpu_model": "h100-80gb"}


def submit(user, name="j", **kw):
    return job_submit(user=user, name=name, **{**JOB, **kw})


def run_to_end(client, job, exit_code: int):
    """The node starts ``job`` (admitted by a cycle) and reports it ended with ``exit_code``."""
    job.refresh_from_db()
    assert job.state == "admitted", (job.state, job.pending_reason_message)
    for event in ({"type": "started"}, {"type": "exited", "exit_code": exit_code}):
        client.post(f"/api/v1/node/jobs/{job.pk}/events/", {"attempt": job.attempt, **event}, format="json")
    job.refresh_from_db()
    return job


@pytest.mark.parametrize("condition, state, status", [
    ("afterok", "running", WAITING), ("afterok", "succeeded", MET), ("afterok", "failed", NEVER),
    ("afterok", "cancelled", NEVER), ("afternotok", "succeeded", NEVER), ("afternotok", "timed-out", MET),
    ("afternotok", "pending", WAITING), ("afterany", "failed", MET), ("afterany", "succeeded", MET),
    ("afterany", "held", WAITING),
])
def test_each_condition_means_what_slurm_means(condition, state, status):
    assert dependency_status(condition, state) == status


def test_it_reads_slurms_dependency_syntax():
    assert dependency_parse("afterok:12:13,afterany:7_*, afternotok:7_3") == [
        ("afterok", "12"), ("afterok", "13"), ("afterany", "7_*"), ("afternotok", "7_3")]


@pytest.mark.parametrize("text, says", [
    ("after:12", "'after' is not a condition"), ("afterok", "names no job"), ("afterok:x", "cannot read the job 'x'"),
    ("afterok:1,", None), ("afterok:" + "1:" * 300, "at most 500 characters"),
])
def test_a_bad_dependency_is_refused_with_the_rule(text, says):
    if says is None:
        assert dependency_parse(text) == [("afterok", "1")]
        return
    with pytest.raises(ValidationError) as exc:
        dependency_parse(text)
    message = exc.value.message_dict["dependency"][0]
    assert says in message and "afterok:12:13" in message


def test_an_evaluation_waits_for_training_and_starts_after_it_succeeds(alice, api, node_client):
    client = node_client()
    training = submit(alice, "train", gpus=4)
    resp = api(alice).post("/api/v1/jobs/", {"name": "eval", "kind": "evaluation", **JOB,
                                             "dependency": f"afterok:{training.pk}"}, format="json")
    assert resp.status_code == 201 and resp.json()["dependency"] == f"afterok:{training.pk}"
    evaluation = Job.objects.get(pk=resp.json()["id"])
    run_cycle()
    body = api(alice).get(f"/api/v1/jobs/{evaluation.pk}/").json()
    assert body["state"] == "pending" and body["queue_position"] is None
    assert body["pending_reason"] == {"code": "Dependency", "message": f"waiting for job {training.pk}",
                                      "details": {"jobs": [training.pk]}}
    run_to_end(client, training, 0)
    run_cycle()
    evaluation.refresh_from_db()
    assert evaluation.state == "admitted"


def test_an_evaluation_whose_training_failed_never_starts_and_says_why(alice, api, node_client):
    client = node_client()
    training = submit(alice, "train")
    evaluation = submit(alice, "eval", dependency=f"afterok:{training.pk}")
    run_cycle()
    run_to_end(client, training, 3)
    run_cycle()
    body = api(alice).get(f"/api/v1/jobs/{evaluation.pk}/").json()
    assert body["state"] == "cancelled" and body["allocations"] == []
    assert body["pending_reason"]["code"] == "DependencyNeverSatisfied"
    assert body["pending_reason"]["message"] == (
        f"job {training.pk} ended failed, and this job was to run only after it succeeded (afterok)")
    assert body["transitions"][-1]["cause"].startswith("dependency never satisfied: job")


def test_afternotok_runs_the_cleanup_only_when_the_job_failed(alice, node_client):
    client = node_client()
    training = submit(alice, "train")
    cleanup = submit(alice, "cleanup", dependency=f"afternotok:{training.pk}")
    report = submit(alice, "report", dependency=f"afterany:{training.pk}")
    run_cycle()
    run_to_end(client, training, 1)
    run_cycle()
    cleanup.refresh_from_db(), report.refresh_from_db()
    assert (cleanup.state, report.state) == ("admitted", "admitted")


def test_a_cleanup_after_a_job_that_succeeded_never_runs(alice, node_client):
    training = submit(alice, "train")
    cleanup = submit(alice, "cleanup", dependency=f"afternotok:{training.pk}")
    run_cycle()
    run_to_end(node_client(), training, 0)
    run_cycle()
    cleanup.refresh_from_db()
    assert cleanup.state == "cancelled" and cleanup.pending_reason_message == (
        f"job {training.pk} succeeded, and this job was to run only if it did not (afternotok)")


def test_a_chain_ends_link_by_link_when_its_first_job_fails(alice, node_client):
    client = node_client()
    first = submit(alice, "a")
    second = submit(alice, "b", dependency=f"afterok:{first.pk}")
    third = submit(alice, "c", dependency=f"afterok:{second.pk}")
    run_cycle()
    run_to_end(client, first, 1)
    run_cycle()  # b can never start; c's own answer comes from the cycle that follows
    run_cycle()
    states = dict(Job.objects.filter(pk__in=[second.pk, third.pk]).values_list("pk", "state"))
    assert states == {second.pk: "cancelled", third.pk: "cancelled"}
    third.refresh_from_db()
    assert third.pending_reason_message.startswith(f"job {second.pk} ended cancelled")


def test_a_job_may_wait_for_every_task_of_an_array(alice, node_client):
    client = node_client()
    sweep = array_submit(user=alice, array="0-1", name="sweep", **JOB)
    tasks = list(sweep.tasks.order_by("array_index"))
    merge = submit(alice, "merge", dependency=f"afterok:{sweep.pk}_*")
    assert set(JobDependency.objects.filter(job=merge).values_list("on_id", flat=True)) == {t.pk for t in tasks}
    run_cycle()
    run_to_end(client, tasks[0], 0)
    run_cycle()
    merge.refresh_from_db()
    assert merge.state == "pending" and merge.pending_reason_message == f"waiting for job {tasks[1].pk}"
    run_to_end(client, tasks[1], 0)
    run_cycle()
    merge.refresh_from_db()
    assert merge.state == "admitted"


def test_array_tasks_waiting_for_a_job_take_none_of_the_arrays_room(alice):
    training = submit(alice, "train", gpus=4)
    sweep = array_submit(user=alice, array="0-3%2", name="eval", dependency=f"afterany:{training.pk}", **JOB)
    run_cycle()
    assert set(sweep.tasks.values_list("pending_reason_code", flat=True)) == {"Dependency"}


def test_a_dependency_on_another_teams_job_is_refused_as_a_missing_one(alice, charlie, api):
    theirs = submit(alice, "vision-only")
    for ref in (str(theirs.pk), "999999"):
        resp = api(charlie).post("/api/v1/jobs/", {"name": "x", "command": "true", "dependency": f"afterok:{ref}"},
                                 format="json")
        assert resp.status_code == 400
        assert resp.json()["errors"]["dependency"] == [f"no job of yours has the id {ref}"]
    assert Job.objects.count() == 1 and not JobDependency.objects.exists()


def test_the_quote_says_the_job_would_wait_for_its_dependency(alice, api):
    training = submit(alice, "train")
    body = api(alice).post("/api/v1/jobs/quote/", {"name": "q", **JOB, "dependency": f"afterok:{training.pk}"},
                           format="json").json()
    assert body["starts_now"] is False and body["pending_reason"]["code"] == "Dependency"


def test_the_submit_form_takes_a_dependency(alice, client):
    training = submit(alice, "train")
    client.force_login(alice)
    response = client.post("/jobs/new/", {"team": "vision", "name": "eval", "kind": "evaluation", "gpus": 1,
                                          "dependency": f"afterok:{training.pk}", **JOB})
    evaluation = Job.objects.get(name="eval")
    assert response.status_code == 302 and evaluation.dependency == f"afterok:{training.pk}"
    bad = client.post("/jobs/new/", {"team": "vision", "name": "eval2", "kind": "evaluation", "gpus": 1,
                                     "dependency": "afterok:999999", **JOB})
    assert "no job of yours has the id 999999" in bad.content.decode()
