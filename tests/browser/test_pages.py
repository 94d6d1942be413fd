"""Browser tests: Playwright drives Debian's Chromium against a live server with a real Celery worker
and a real node agent. Screenshots of the key pages land in test-artifacts/ for a person to look at."""

import os
import shutil
from pathlib import Path

import pytest

from scheduler.models import Job
from scheduler.services.jobs import job_submit

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def browser_instance():
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"Chromium is required for the browser tests: install Debian's chromium ({CHROMIUM})")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # Playwright's sync API runs an event loop in this thread
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                    args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        yield browser
        browser.close()


@pytest.fixture
def page(browser_instance, live_server):
    context = browser_instance.new_context(viewport={"width": 1280, "height": 900}, base_url=live_server.url)
    page = context.new_page()
    page.set_default_timeout(20_000)
    yield page
    context.close()


def sign_in(page, username):
    page.goto("/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", "pw-Example-123")
    page.click("button[type=submit]")
    page.wait_for_url("**/")


def shot(page, name):
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def test_a_member_submits_a_job_from_the_form_and_watches_it_run(
    page, alice, cluster, celery_worker, start_agent, settings
):
    settings.ROTA_NODE_HEARTBEAT_INTERVAL_S = 1
    start_agent(cluster["nodes"][0])
    sign_in(page, "alice")
    page.goto("/jobs/new/")
    page.fill("#id_name", "from-the-browser")
    page.fill("#id_command", "echo hello from $CUDA_VISIBLE_DEVICES; sleep 1")
    page.select_option("#id_gpu_model", "h100-80gb")
    page.wait_for_selector("#quote >> text=Starts now")
    shot(page, "submit")
    page.click("button.primary")
    page.wait_for_url("**/jobs/*/")
    page.wait_for_selector(".statusline .state-succeeded", timeout=45_000)
    assert "hello from 0" in page.inner_text("#log")
    shot(page, "job-detail")


def test_a_member_sees_why_a_job_waits(page, alice, cluster):
    job_submit(user=alice, name="fills-quota", command="sleep 100", gpu_model="h100-80gb", gpus=4)
    from scheduler.cycle import run_cycle

    run_cycle()
    waiting = job_submit(user=alice, name="waits", command="true", gpu_model="h100-80gb", gpus=2)
    run_cycle()
    sign_in(page, "alice")
    page.goto("/jobs/")
    row = page.locator("tr", has_text="waits")
    assert "QuotaExceeded" in row.inner_text()
    page.goto(f"/jobs/{waiting.pk}/")
    reason = page.inner_text(".reason")
    assert "QuotaExceeded" in reason and "vision" in reason
    shot(page, "jobs-table")


def test_a_member_cannot_open_another_teams_job(page, alice, charlie, cluster):
    job = job_submit(user=alice, name="vision-only", command="true", gpu_model="h100-80gb")
    sign_in(page, "charlie")
    response = page.goto(f"/jobs/{job.pk}/")
    assert response.status == 404
    page.goto("/jobs/")
    assert "vision-only" not in page.content()
    assert Job.objects.get(pk=job.pk).state == "pending"


def test_an_admin_edits_a_quota_and_the_change_shows_in_the_audit_log(page, cluster):
    from tests.factories import UserFactory

    UserFactory(username="root-admin", is_staff=True, is_superuser=True)
    sign_in(page, "root-admin")
    page.goto("/govern/quotas/")
    page.fill('input[name="q:vision:h100-80gb:limit"]', "6")
    page.fill("#reason", "vision needs more for the Q4 push")
    page.click("button[value=preview]")
    page.click("button[value=save]")
    page.goto("/govern/audit/")
    body = page.inner_text("main")
    assert "vision" in body and "h100-80gb" in body and "Q4 push" in body
    assert "root-admin" in body
    shot(page, "audit-log")
    from scheduler.models import Quota

    assert Quota.objects.get(team__name="vision", gpu_model__name="h100-80gb").limit == 6


def test_a_refreshing_job_page_keeps_the_keyboard_focus_and_the_log_position(page, alice, cluster):
    """The job page refreshes every 2 s: a keyboard user's focus on Cancel and a reader's place in the log
    survive it (focus fell to the page, and the log jumped back to its first line)."""
    from scheduler.models import JobLog

    job = job_submit(user=alice, name="long-log", command="true", gpu_model="h100-80gb")  # pending: refreshes
    JobLog.objects.create(job=job, attempt=1, content="".join(f"line {i}\n" for i in range(300)))
    sign_in(page, "alice")
    page.goto(f"/jobs/{job.pk}/")
    log_at_end = "(() => { const l = document.getElementById('log'); return l.scrollTop + l.clientHeight >= " \
                 "l.scrollHeight - 4 && l.scrollTop > 0; })()"
    assert page.evaluate(log_at_end), "a log opens at its latest output"

    def refreshed():
        with page.expect_response(lambda r: r.url.endswith(f"/jobs/{job.pk}/log/")):
            pass
        page.wait_for_timeout(300)  # htmx settles the swap

    page.focus(f"form[action='/jobs/{job.pk}/cancel/'] button")
    page.evaluate("document.getElementById('log').scrollTop = 1000")
    refreshed()
    assert page.evaluate("document.activeElement.textContent") == "Cancel"
    assert abs(page.evaluate("document.getElementById('log').scrollTop") - 1000) < 5
    page.once("dialog", lambda dialog: dialog.accept())
    page.keyboard.press("Enter")  # cancel with the keyboard alone
    page.wait_for_selector(".statusline .state-cancelled")
    assert Job.objects.get(pk=job.pk).state == "cancelled"


def test_a_kind_whose_default_class_is_not_open_to_the_team_gets_the_nearest_one_and_says_so(page, alice, cluster):
    from scheduler.models import PriorityClass

    earlier = job_submit(user=alice, name="served", command="true", gpu_model="a100-40gb",
                         priority_class="production-inference")  # before the class was restricted
    serving = PriorityClass.objects.get(name="production-inference")
    serving.restricted = True
    serving.save()
    serving.teams.add(cluster["nlp"])
    sign_in(page, "alice")
    page.goto(f"/jobs/new/?copy={earlier.pk}")  # copy and edit: the copied class is not silently swapped
    assert page.input_value("#id_priority_class") == "interactive"
    assert page.locator("#class-note").inner_text().startswith("production-inference is not open to team vision")
    page.goto("/jobs/new/")
    page.click(".kind-card[data-kind=inference]")
    assert page.input_value("#id_priority_class") == "interactive"
    note = page.locator("#class-note")
    assert note.is_visible()
    assert note.inner_text() == "production-inference is not open to team vision: interactive is chosen instead."
    page.click(".kind-card[data-kind=training]")  # a kind whose default is open: the note goes away
    assert page.input_value("#id_priority_class") == "training" and not note.is_visible()
    # A member of a team that may use it too: switching teams brings the class asked for back.
    from portal.models import Membership
    from tests.factories import MembershipFactory

    MembershipFactory(user=alice, team=cluster["nlp"], role=Membership.MEMBER)
    page.goto("/jobs/new/")
    page.select_option("#id_team", "vision")
    page.click(".kind-card[data-kind=inference]")
    assert page.input_value("#id_priority_class") == "interactive" and note.is_visible()
    page.select_option("#id_team", "nlp")
    assert page.input_value("#id_priority_class") == "production-inference" and not note.is_visible()
    page.select_option("#id_team", "vision")
    page.focus("#id_priority_class")  # chosen by hand (the keyboard: a trusted change): kept across teams
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowDown")
    assert page.input_value("#id_priority_class") == "batch"
    page.select_option("#id_team", "nlp")
    assert page.input_value("#id_priority_class") == "batch"
    page.goto("/jobs/new/")
    page.select_option("#id_team", "vision")
    page.click(".kind-card[data-kind=inference]")
    page.fill("#id_name", "web-demo")
    page.fill("#id_command", "python -m http.server $PORT")
    page.select_option("#id_gpu_model", "a100-40gb")
    page.click("button.primary")
    page.wait_for_url("**/jobs/*/")
    job = Job.objects.get(name__startswith="web-demo")  # one replica
    assert job.priority_class.name == "interactive" and job.kind == "inference"
