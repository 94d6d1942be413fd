"""Job arrays in the browser and the CLI: submitted from the form, one row in the jobs table with its tasks
counted by state, its own page with a cancel button, `rota submit --array` and `rota array`."""

import pytest
from rest_framework.authtoken.models import Token

from portal import cli
from scheduler.cycle import run_cycle
from scheduler.models import Job, JobArray
from scheduler.services.arrays import array_submit
from scheduler.services.jobs import job_submit

TASK = {"name": "sweep", "command": "python train.py", "gpu_model": "h100-80gb"}


@pytest.fixture
def browser(client):
    def login(user):
        client.force_login(user)
        return client

    return login


@pytest.mark.django_db
def test_the_submit_form_submits_an_array_and_shows_its_page(alice, browser):
    response = browser(alice).post("/jobs/new/", {"team": "vision", "kind": "training", "gpus": 1,
                                                  "array": "0-7%2", **TASK})
    job_array = JobArray.objects.get()
    assert response.status_code == 302 and response.url == f"/jobs/?array={job_array.pk}"
    assert (job_array.size, job_array.max_running) == (8, 2)
    page = browser(alice).get(response.url).content.decode()
    assert f"Array {job_array.pk}: sweep" in page and "8 pending" in page and "Cancel array" in page
    assert page.count('class="row-pending"') == 8  # the array's own page lists each task


@pytest.mark.django_db
def test_the_submit_form_names_a_bad_array_inline_and_saves_nothing(alice, browser):
    response = browser(alice).post("/jobs/new/", {"team": "vision", "kind": "training", "gpus": 1,
                                                  "array": "7-0", **TASK})
    assert response.status_code == 200
    assert "the range 7-0 runs backwards" in response.content.decode()
    assert not Job.objects.exists() and not JobArray.objects.exists()


@pytest.mark.django_db
def test_the_jobs_table_shows_an_array_as_one_row_with_its_tasks_counted(alice, browser,
                                                                       django_assert_max_num_queries):
    job_array = array_submit(user=alice, array="0-5%2", **TASK)
    other = job_submit(user=alice, name="solo", command="true", gpu_model="h100-80gb")
    run_cycle()
    client = browser(alice)
    with django_assert_max_num_queries(10):
        page = client.get("/jobs/").content.decode()
    assert page.count('class="row-array"') == 1 and f"array {job_array.pk}" in page
    assert "2 admitted" in page and "4 pending" in page and "at most 2 at once" in page
    assert f'href="/jobs/{other.pk}/"' in page
    # Filtered to running work, the array still stands as one row.
    assert browser(alice).get("/jobs/?state=admitted").content.decode().count('class="row-array"') == 1


@pytest.mark.django_db
def test_the_array_page_cancels_every_task_and_an_outsider_gets_404(alice, bob, charlie, browser):
    job_array = array_submit(user=alice, array="0-3", **TASK)
    assert browser(charlie).get(f"/jobs/?array={job_array.pk}").status_code == 404
    assert browser(charlie).post(f"/jobs/arrays/{job_array.pk}/cancel/").status_code == 404
    assert "Cancel array" not in browser(bob).get(f"/jobs/?array={job_array.pk}").content.decode()
    assert browser(bob).post(f"/jobs/arrays/{job_array.pk}/cancel/").status_code == 403
    assert browser(alice).post(f"/jobs/arrays/{job_array.pk}/cancel/").status_code == 302
    assert set(job_array.tasks.values_list("state", flat=True)) == {"cancelled"}


@pytest.fixture
def rota(transactional_db, live_server, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("ROTA_URL", live_server.url)

    def run(user, *argv):
        monkeypatch.setenv("ROTA_TOKEN", Token.objects.get_or_create(user=user)[0].key)
        return cli.main(list(argv))

    return run


def test_rota_submit_array_and_rota_array_show_and_cancel(rota, alice, capsys):
    assert rota(alice, "submit", "--name", "sweep", "--gpu-model", "h100-80gb", "--array", "0-3%2", "--",
                "echo", "$ROTA_ARRAY_INDEX") == 0
    job_array = JobArray.objects.get()
    ids = sorted(job_array.tasks.values_list("pk", flat=True))
    assert capsys.readouterr().out.strip() == (
        f"Submitted array {job_array.pk} (sweep): 4 tasks, jobs {ids[0]}-{ids[-1]}, to team vision")
    assert rota(alice, "array", str(job_array.pk)) == 0
    out = capsys.readouterr().out
    assert "4 tasks, at most 2 at once" in out and "pending" in out
    assert rota(alice, "array", str(job_array.pk), "--cancel") == 0
    assert "cancel requested for 4 tasks" in capsys.readouterr().out
    assert set(job_array.tasks.values_list("state", flat=True)) == {"cancelled"}
    assert rota(alice, "submit", "--name", "bad", "--array", "3-1", "--", "true") == 1
    assert "array" in capsys.readouterr().err


def test_rota_submit_depends_and_retries_and_rota_show_prints_them(rota, alice, capsys):
    first = job_submit(user=alice, name="train", command="true", gpu_model="h100-80gb")
    assert rota(alice, "submit", "--name", "eval", "--gpu-model", "h100-80gb", "--depends", f"afterok:{first.pk}",
                "--max-retries", "2", "--retry-on", "failed,timed-out", "--retry-backoff", "5", "--", "true") == 0
    job = Job.objects.get(name="eval")
    assert (job.dependency, job.max_retries, job.retry_on, job.retry_backoff_s) == (
        f"afterok:{first.pk}", 2, ["failed", "timed-out"], 5)
    capsys.readouterr()
    assert rota(alice, "show", str(job.pk)) == 0
    out = capsys.readouterr().out
    assert f"dependency:         afterok:{first.pk}" in out and "retries:            0 of 2 on failed, timed-out" in out
    assert rota(alice, "submit", "--name", "bad", "--retry-on", "sometimes", "--max-retries", "1", "--", "true") == 1
    assert "retry_on" in capsys.readouterr().err


def test_rota_watch_follows_a_job_until_it_ends(rota, alice, capsys, monkeypatch):
    from portal import cli_flow
    from scheduler.services.common import db_now, job_transition

    job = job_submit(user=alice, name="w", command="true", gpu_model="h100-80gb")
    polls = []

    def ends(_seconds):
        polls.append(1)
        job_transition(job.pk, from_states=("pending",), to_state="cancelled", cause="cancelled by alice", at=db_now())

    monkeypatch.setattr(cli_flow.time, "sleep", ends)
    capsys.readouterr()
    assert rota(alice, "watch", str(job.pk)) == 1  # it did not succeed
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("pending    submitted") and "waiting    Scheduling:" in out[1]
    assert out[2].endswith("cancelled  cancelled by alice") and polls == [1]


def test_rota_watch_array_prints_its_counts_until_every_task_ended(rota, alice, capsys, monkeypatch):
    from portal import cli_flow

    job_array = array_submit(user=alice, array="0-1", **TASK)

    def ends(_seconds):
        job_array.tasks.update(state="succeeded")

    monkeypatch.setattr(cli_flow.time, "sleep", ends)
    capsys.readouterr()
    assert rota(alice, "watch", "--array", str(job_array.pk)) == 0
    assert capsys.readouterr().out.splitlines() == [f"array {job_array.pk}: 2 pending",
                                                    f"array {job_array.pk}: 2 succeeded"]
