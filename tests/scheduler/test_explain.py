"""What would make it start: the engine's reason for a waiting job and the changes, each tried on a copy of
the cluster by the real engine, that would start it now or sooner; and the one-click resubmit."""

from datetime import timedelta

import pytest

from scheduler.cycle import run_cycle
from scheduler.models import Job, Quota
from scheduler.models.jobs import JobState
from scheduler.services.jobs import job_submit

pytestmark = pytest.mark.django_db


def explain(client, job):
    return client.get(f"/api/v1/jobs/{job.pk}/explain/")


def change(body, key):
    return next((s for s in body["would_start_if"] if key in s["change"]), None)


def limit_vision_h100_to_3():
    Quota.objects.filter(team__name="vision", gpu_model__name="h100-80gb").update(limit=3)


def test_a_job_over_its_teams_limit_would_start_with_as_many_gpus_as_the_limit(api, alice):
    limit_vision_h100_to_3()
    big = job_submit(user=alice, name="big", command="true", gpu_model="h100-80gb", gpus=4)
    run_cycle()
    body = explain(api(alice), big).json()
    assert body["reason"]["code"] == "QuotaExceeded" and body["reason"]["details"]["limit"] == 3
    fewer = change(body, "gpus")
    assert fewer["change"] == {"gpus": 3} and fewer["starts_now"] and fewer["resubmit"]
    assert fewer["estimated_start"] is not None
    # Applying it: the job is replaced by a 4-GPU copy that the next cycle starts.
    response = api(alice).post(f"/api/v1/jobs/{big.pk}/resubmit/", fewer["change"], format="json")
    assert response.status_code == 201, response.json()
    new = Job.objects.get(pk=response.json()["id"])
    assert (new.gpus, new.gpu_model.name, new.command, new.team.name) == (3, "h100-80gb", "true", "vision")
    big.refresh_from_db()
    assert big.state == JobState.CANCELLED and f"#{new.pk}" in big.transitions.last().cause
    run_cycle()
    new.refresh_from_db()
    assert new.state == JobState.ADMITTED


def test_a_job_waiting_for_its_teams_running_jobs_gets_the_wait_and_another_model(api, alice):
    running = job_submit(user=alice, name="run", command="true", gpu_model="h100-80gb", gpus=4,
                         time_limit_minutes=60)
    run_cycle()
    running.refresh_from_db()
    assert running.state == JobState.ADMITTED
    waiting = job_submit(user=alice, name="wait", command="true", gpu_model="h100-80gb", gpus=1)
    run_cycle()
    body = explain(api(alice), waiting).json()
    assert body["reason"]["code"] == "QuotaExceeded"
    wait = change(body, "wait")
    assert wait is not None and not wait["starts_now"] and not wait["resubmit"]
    ends = running.admitted_at + timedelta(minutes=60)
    assert abs((Job._meta.get_field("created_at").to_python(wait["estimated_start"]) - ends).total_seconds()) < 2
    other = change(body, "gpu_model")
    assert other["change"] == {"gpu_model": "a100-40gb"} and other["starts_now"]
    assert change(body, "gpus") is None, "it asks for one GPU already"


def test_a_team_at_its_limit_is_told_how_much_more_quota_would_start_the_job(api, charlie):
    job_submit(user=charlie, name="two", command="true", gpu_model="h100-80gb", gpus=2)
    run_cycle()
    third = job_submit(user=charlie, name="third", command="true", gpu_model="h100-80gb", gpus=1)
    run_cycle()
    body = explain(api(charlie), third).json()
    quota = change(body, "quota")
    assert quota["change"] == {"quota": {"team": "nlp", "gpu_model": "h100-80gb", "extra_gpus": 1}}
    assert quota["starts_now"] and not quota["resubmit"]


def test_a_quota_change_cannot_be_resubmitted_and_bad_values_are_named(api, alice):
    big = job_submit(user=alice, name="big", command="true", gpu_model="h100-80gb", gpus=5)
    refused = api(alice).post(f"/api/v1/jobs/{big.pk}/resubmit/", {"quota": 1}, format="json")
    assert refused.status_code == 400 and "quota" in refused.json()["errors"]
    bad = api(alice).post(f"/api/v1/jobs/{big.pk}/resubmit/", {"gpus": 0}, format="json")
    assert bad.status_code == 400 and "gpus" in bad.json()["errors"]
    big.refresh_from_db()
    assert big.state == JobState.PENDING and Job.objects.count() == 1, "nothing half-written"


def test_only_who_manages_the_job_resubmits_it_and_outsiders_see_nothing(api, alice, bob, charlie):
    big = job_submit(user=alice, name="big", command="true", gpu_model="h100-80gb", gpus=5)
    assert explain(api(bob), big).status_code == 200
    assert api(bob).post(f"/api/v1/jobs/{big.pk}/resubmit/", {"gpus": 4}, format="json").status_code == 403
    assert explain(api(charlie), big).status_code == 404
    assert api(charlie).post(f"/api/v1/jobs/{big.pk}/resubmit/", {"gpus": 4}, format="json").status_code == 404
    assert Job.objects.count() == 1


def test_a_job_that_does_not_wait_has_nothing_to_explain(api, alice):
    job = job_submit(user=alice, name="ok", command="true", gpu_model="h100-80gb", gpus=1)
    run_cycle()
    body = explain(api(alice), job).json()
    assert body == {"state": "admitted", "reason": None, "would_start_if": []}
    assert api(alice).post(f"/api/v1/jobs/{job.pk}/resubmit/", {"gpus": 2}, format="json").status_code == 400


def test_the_job_page_shows_the_changes_and_resubmits_in_one_click(alice, client):
    limit_vision_h100_to_3()
    big = job_submit(user=alice, name="big", command="true", gpu_model="h100-80gb", gpus=4)
    run_cycle()
    client.force_login(alice)
    assert b"What would make it start" in client.get(f"/jobs/{big.pk}/").content
    panel = client.get(f"/jobs/{big.pk}/explain/").content.decode()
    assert "ask for 3 GPUs instead of 4" in panel and "Resubmit with this change" in panel
    response = client.post(f"/jobs/{big.pk}/resubmit/", {"gpus": "3"})
    new = Job.objects.exclude(pk=big.pk).get()
    assert response.status_code == 302 and response["Location"] == f"/jobs/{new.pk}/" and new.gpus == 3


def test_a_job_behind_a_reservation_would_start_with_a_time_limit_that_fits_before_it(api, alice):
    Quota.objects.filter(team__name="vision", gpu_model__name="h100-80gb").update(guaranteed=8, limit=8)
    job_submit(user=alice, name="first", command="true", gpu_model="h100-80gb", gpus=2, time_limit_minutes=60,
               preemptible=False)
    run_cycle()
    # The whole node for an urgent job: it waits for the first job's end, with the GPUs reserved for it.
    job_submit(user=alice, name="urgent", command="true", gpu_model="h100-80gb", gpus=4,
               priority_class="interactive", preemptible=True)
    late = job_submit(user=alice, name="late", command="true", gpu_model="h100-80gb", gpus=2,
                      time_limit_minutes=240)
    run_cycle()
    late.refresh_from_db()
    assert late.state == JobState.PENDING
    body = explain(api(alice), late).json()
    shorter = change(body, "time_limit_minutes")
    assert shorter is not None and shorter["starts_now"] and shorter["resubmit"], body
    assert 50 <= shorter["change"]["time_limit_minutes"] <= 60
