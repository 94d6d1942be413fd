"""Browser tests of arrays and dependencies: Playwright drives Chromium against a live server with a real
Celery worker and node agent. An array of 8 capped at 2 submitted from the form never holds more than 2 GPUs
at once and its page counts its tasks; an evaluation that depends afterok on a training job waits with
Dependency and shows DependencyNeverSatisfied once the training fails."""

import pytest

from scheduler.models import Allocation, Job, JobArray
from tests.browser.test_pages import browser_instance, page, shot, sign_in  # noqa: F401 (fixtures)
from tests.processes import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def submit_from_form(page, name, command, quote="Starts now", **fields):  # noqa: F811
    page.goto("/jobs/new/")
    page.fill("#id_name", name)
    page.fill("#id_command", command)
    page.select_option("#id_gpu_model", "h100-80gb")
    for field, value in fields.items():
        page.fill(f"#id_{field}", value)
    page.wait_for_selector(f"#quote >> text={quote}")
    page.click("button.primary")


def test_an_array_of_8_capped_at_2_from_the_form_runs_2_at_a_time(page, alice, cluster, celery_worker,  # noqa: F811
                                                                  start_agent, settings):
    settings.ROTA_NODE_HEARTBEAT_INTERVAL_S = 1
    start_agent(cluster["nodes"][0])
    sign_in(page, "alice")
    submit_from_form(page, "sweep", 'echo "task $ROTA_ARRAY_INDEX"; sleep 1', array="0-7%2")
    page.wait_for_url("**/jobs/?array=*")
    job_array = JobArray.objects.get()
    assert f"Array {job_array.pk}: sweep" in page.inner_text("#array-head")
    most = 0

    def done():
        nonlocal most
        most = max(most, Allocation.objects.filter(job__array=job_array, ended_at__isnull=True)
                   .values("job_id").distinct().count())
        return set(job_array.tasks.values_list("state", flat=True)) == {"succeeded"}

    wait_for(done, timeout=120, interval=0.1, what="every task to succeed")
    assert most == 2
    page.reload()
    assert "8 succeeded" in page.inner_text("#array-head")
    page.goto("/jobs/")
    row = page.locator("tr.row-array")
    assert row.count() == 1 and "8 succeeded" in row.inner_text()
    shot(page, "array-row")


def test_an_evaluation_waits_for_training_and_never_starts_when_it_fails(page, alice, cluster,  # noqa: F811
                                                                       celery_worker, start_agent, settings,
                                                                       team_dir):
    settings.ROTA_NODE_HEARTBEAT_INTERVAL_S = 1
    start_agent(cluster["nodes"][0])
    sign_in(page, "alice")
    # The training fails once the page has shown the evaluation waiting for it (the job runs as its team's
    # uid, so the file it waits for is in a directory of the team's).
    go = team_dir(cluster["vision"]) / "fail-now"
    submit_from_form(page, "train", f"while [ ! -e {go} ]; do sleep 0.2; done; exit 1")
    page.wait_for_url("**/jobs/*/")
    training = Job.objects.get(name="train")
    # The quote already says what the evaluation will wait for.
    submit_from_form(page, "eval", "echo evaluating", quote=f"waiting for job {training.pk}",
                     dependency=f"afterok:{training.pk}")
    page.wait_for_url("**/jobs/*/")
    page.wait_for_selector(f".reason >> text=waiting for job {training.pk}", timeout=60_000)
    go.touch()
    page.wait_for_selector(".reason >> text=DependencyNeverSatisfied", timeout=60_000)
    assert f"job {training.pk} ended failed" in page.inner_text(".reason")
    assert Job.objects.get(name="eval").state == "cancelled"
    shot(page, "dependency-never-satisfied")
