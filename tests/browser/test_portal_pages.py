"""Browser tests of the portal pages: the team dashboard (a team-admin adds a member; a member sees no
management) and submitting from a saved template after picking a kind. Screenshots go to test-artifacts/."""

import pytest

from portal.models import Membership
from scheduler.models import Job, JobTemplate
from tests.browser.test_pages import browser_instance, page, shot, sign_in  # noqa: F401 (fixtures)
from tests.factories import MembershipFactory, UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def victor(cluster):
    user = UserFactory(username="victor")
    MembershipFactory(user=user, team=cluster["vision"], role=Membership.TEAM_ADMIN)
    return user


def test_a_team_admin_opens_the_team_dashboard_and_adds_a_member(page, victor, alice, charlie, cluster):  # noqa: F811
    sign_in(page, "victor")
    page.click("nav[aria-label=main] >> text=Teams")
    page.wait_for_url("**/teams/vision/")
    quota = page.locator("table.quota-standing")
    assert "h100-80gb" in quota.inner_text() and "a100-40gb" in quota.inner_text()
    assert page.inner_text(".factor") == "1.000"
    page.click("summary:has-text('How this is computed')")
    assert "2−U/S" in page.inner_text(".explain").replace(" ", "") or "U/S" in page.inner_text(".explain")
    page.fill("#id_username", "charlie")
    page.select_option("#id_role", "member")
    page.click("button:has-text('Add or change role')")
    page.wait_for_selector(".msg.success")
    assert "charlie" in page.inner_text("#members table")
    shot(page, "team-dashboard")
    assert Membership.objects.filter(user=charlie, team=cluster["vision"]).exists()


def test_a_member_sees_the_dashboard_without_member_management(page, alice, cluster):  # noqa: F811
    sign_in(page, "alice")
    page.goto("/teams/vision/")
    assert page.locator("#members").count() == 0
    assert "Fair share" in page.inner_text("main")


def test_a_member_picks_a_kind_then_applies_a_saved_template_and_submits(page, alice, victor, cluster):  # noqa: F811
    template = JobTemplate.objects.create(
        team=cluster["vision"], name="resnet-2gpu", kind="training", created_by=victor,
        fields={"name": "resnet", "command": "python train.py --epochs 1", "gpus": 2, "gpu_model": "h100-80gb",
                "time_limit_minutes": 90},
    )
    sign_in(page, "alice")
    page.goto("/jobs/new/")
    page.click(".kind-card[data-kind=notebook]")
    assert page.input_value("#id_kind") == "notebook"
    assert page.input_value("#id_time_limit_minutes") == "720"
    assert page.is_visible("#id_idle_timeout_minutes") and not page.is_visible("#id_nodes")
    page.click("text=resnet-2gpu")
    page.wait_for_url(f"**/jobs/new/?template={template.pk}")
    assert page.input_value("#id_kind") == "training"
    assert page.input_value("#id_gpus") == "2" and page.input_value("#id_time_limit_minutes") == "90"
    assert "--epochs 1" in page.input_value("#id_command")
    assert page.is_visible("#id_nodes") and not page.is_visible("#id_idle_timeout_minutes")
    page.wait_for_selector("#quote >> text=Starts now")
    shot(page, "submit-from-template")
    page.click("button.primary:has-text('Submit')")
    page.wait_for_url("**/jobs/*/")
    job = Job.objects.get()
    assert (job.name, job.gpus, job.time_limit_minutes, job.submitted_by) == ("resnet", 2, 90, alice)


def test_switching_kind_keeps_what_the_member_set_by_hand(page, alice, cluster):  # noqa: F811
    sign_in(page, "alice")
    page.goto("/jobs/new/")
    page.click(".kind-card[data-kind=notebook]")
    assert page.input_value("#id_time_limit_minutes") == "720"  # the notebook default
    page.fill("#id_time_limit_minutes", "30")
    page.click(".kind-card[data-kind=evaluation]")
    assert page.input_value("#id_time_limit_minutes") == "30", "a value typed by hand survives the switch"
    assert page.input_value("#id_priority_class") == "batch"  # untouched fields follow the kind


def test_the_team_dashboard_and_submit_page_fit_a_phone_screen(browser_instance, live_server, alice, cluster):  # noqa: F811
    context = browser_instance.new_context(viewport={"width": 390, "height": 844}, base_url=live_server.url)
    phone = context.new_page()
    try:
        sign_in(phone, "alice")
        for url, name in (("/teams/vision/", "team-dashboard-phone"), ("/jobs/new/", "submit-phone")):
            phone.goto(url)
            assert phone.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"), url
            shot(phone, name)
    finally:
        context.close()


def test_an_admin_reprioritizes_a_waiting_job_and_sees_the_gpu_heatmap(page, alice, cluster):  # noqa: F811
    from scheduler.models import Gpu
    from scheduler.services.jobs import job_submit

    UserFactory(username="root-admin", is_staff=True, is_superuser=True)
    job = job_submit(user=alice, name="needs-it-soon", command="true", gpu_model="h100-80gb", gpus=8)
    Gpu.objects.filter(uuid__startswith="GPU-h100").update(util_pct=73.0)
    sign_in(page, "root-admin")
    page.goto("/govern/queue/")
    row = page.locator("tr", has_text="needs-it-soon")
    row.locator("summary", has_text="Change priority class").click()
    row.locator("select[name=priority_class]").select_option("interactive")
    row.locator(".priority-change input[name=reason]").fill("demo tomorrow")
    row.locator("button:has-text('Set')").click()
    page.wait_for_selector(".msg.success")
    job.refresh_from_db()
    assert job.priority_class.name == "interactive"
    row = page.locator("tr", has_text="needs-it-soon")
    row.locator("button:has-text('Hold')").click()  # without a reason the browser refuses to send it
    assert row.locator("input[placeholder^='why hold']").evaluate("e => e.validity.valueMissing")
    row.locator("input[placeholder^='why hold']").fill("maintenance window")
    row.locator("button:has-text('Hold')").click()
    page.wait_for_selector("tr:has-text('needs-it-soon') >> text=Release")
    assert "by root-admin: maintenance window" in page.locator("tr", has_text="needs-it-soon").inner_text()
    shot(page, "govern-queue")
    page.goto("/govern/nodes/")
    page.wait_for_selector("#gpu-heatmap .main-svg")
    shot(page, "govern-nodes-heatmap")
    page.goto("/govern/audit/")
    assert "demo tomorrow" in page.inner_text("main") and "job.hold" in page.inner_text("main")


def test_an_admin_allows_a_registry_in_a_pool_and_the_change_is_audited(page, cluster):  # noqa: F811
    from scheduler.models import Pool

    UserFactory(username="root-admin", is_staff=True, is_superuser=True)
    sign_in(page, "root-admin")
    page.goto("/govern/images/")
    form = page.locator("form", has=page.locator("button:has-text('Save images of train')"))
    form.locator("textarea").fill("localhost/rota/*\nregistry.example.com/vision/")
    form.locator("input[name$=reason]").fill("vision's registry")
    form.locator("button").click()
    page.wait_for_selector(".msg.success")
    assert Pool.objects.get(name="train").allowed_images == ["localhost/rota/*", "registry.example.com/vision/"]
    shot(page, "govern-images")
    page.goto("/govern/audit/")
    assert "pool.images" in page.inner_text("main") and "vision's registry" in page.inner_text("main")


def test_an_admin_reads_a_what_if_against_its_baseline(page, alice, cluster):  # noqa: F811
    from datetime import timedelta

    from scheduler.services.common import db_now
    from scheduler.whatif import whatif_create, whatif_execute
    from tests.scheduler.test_whatif import past_job

    admin = UserFactory(username="root-admin", is_staff=True, is_superuser=True)
    gpus = list(cluster["nodes"][0].gpus.order_by("index"))
    t0 = db_now() - timedelta(days=2)
    for i in range(6):  # vision's limit of 4 made two of six one-hour jobs wait an hour
        past_job(alice, cluster["vision"], gpus[i % 4], submitted=t0, waited_s=0 if i < 4 else 3600, ran_s=3600,
                 name=f"h{i}")
    run = whatif_create(user=admin, name="vision limit 6", period_start=t0 - timedelta(hours=1),
                        period_end=t0 + timedelta(hours=3),
                        changes={"quotas": [{"team": "vision", "gpu_model": "h100-80gb", "limit": 6}],
                                 "pool_scale": {"train": 2}})
    whatif_execute(run.pk)
    sign_in(page, "root-admin")
    page.goto(f"/whatif/{run.pk}/")
    page.wait_for_selector("#whatif-fig-1 .main-svg")
    whole = page.locator("section", has_text="Whole period").inner_text()
    assert "Average wait" in whole and "Average job completion time" in whole and "—" not in whole
    assert "Average wait\t20 min\t0 s\t−20 min" in whole  # twice the nodes and a limit of 6: nobody waits
    assert "team vision, gpu model h100-80gb, limit 6" in page.inner_text("main")
    shot(page, "whatif-detail")


def test_a_count_out_of_range_on_the_service_page_reaches_the_server_and_its_message_shows(page, alice, cluster):  # noqa: F811
    """The browser's own check of a number field would block the form silently; the server's message names the
    field and the limit."""
    from scheduler.services.jobs import job_submit

    job_submit(user=alice, name="llm-1", kind="inference", command="serve", gpu_model="h100-80gb",
               env={"ROTA_HEALTH_PATH": "/health"})
    sign_in(page, "alice")
    page.goto("/services/vision/llm/")
    page.fill("form[aria-label=scale] input[name=replicas]", "99")
    page.click("form[aria-label=scale] button:has-text('Scale')")
    page.wait_for_selector("text=replicas: Ensure this value is less than or equal to 16.", timeout=5000)
    assert Job.objects.filter(team=cluster["vision"], kind="inference").count() == 1
