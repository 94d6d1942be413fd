"""Job pages: submit form with inline errors, copy and edit, the jobs table (filter, search, sort, CSV),
job detail and its live parts, tenancy on every page (the outsider gets 404)."""

import csv
import io

import pytest

from scheduler.cycle import run_cycle
from scheduler.models import GpuSample, Job
from scheduler.services.common import db_now
from scheduler.services.jobs import job_submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def browser(client):
    def login(user):
        client.force_login(user)
        return client

    return login


def submit(user, **kw):
    return job_submit(user=user, **{"name": "train-resnet", "command": "python train.py", "gpu_model": "h100-80gb",
                                    **kw})


def test_the_submit_form_creates_a_job_and_redirects_to_it(alice, browser):
    response = browser(alice).post("/jobs/new/", {"team": "vision", "name": "web", "kind": "training",
                                                  "command": "echo hi", "gpus": 1, "gpu_model": "h100-80gb"})
    job = Job.objects.get()
    assert response.status_code == 302 and response.url == f"/jobs/{job.pk}/"
    assert job.submitted_by == alice and job.team.name == "vision"


def test_the_submit_form_shows_errors_inline_and_saves_nothing(alice, browser):
    response = browser(alice).post("/jobs/new/", {"team": "vision", "name": "", "kind": "training",
                                                  "command": "", "gpus": 0})
    assert response.status_code == 200
    body = response.content.decode()
    assert body.count('role="alert"') >= 3
    assert not Job.objects.exists()
    body = browser(alice).post("/jobs/new/", {"team": "vision", "name": "x", "kind": "training", "command": "true",
                                              "gpus": 1, "gpu_fraction": "1"}).content.decode()
    assert "must be greater than 0 and less than 1, with at most 3 decimals (e.g. 0.25)" in body
    body = browser(alice).post("/jobs/new/", {"team": "vision", "name": "x", "kind": "training", "command": "true",
                                              "gpus": 1, "gpu_fraction": "99999"}).content.decode()
    assert body.count("must be greater than 0 and less than 1") == 1, "the rule once, not once per validator"


def test_copy_and_edit_prefills_the_form_from_a_visible_job_only(alice, charlie, browser):
    job = submit(alice, gpus=2)
    page = browser(alice).get(f"/jobs/new/?copy={job.pk}").content.decode()
    assert 'value="train-resnet"' in page and "python train.py" in page and 'value="2"' in page
    assert browser(charlie).get(f"/jobs/new/?copy={job.pk}").status_code == 404


def test_the_jobs_table_filters_searches_and_sorts(alice, bob, browser):
    a = submit(alice, name="alpha")
    b = submit(bob, name="beta")
    submit(alice, name="gamma-cancelled")
    Job.objects.filter(name="gamma-cancelled").update(state="cancelled")
    client = browser(alice)
    assert [j.pk for j in client.get("/jobs/?state=active&sort=name").context["jobs"]] == [a.pk, b.pk]
    assert [j.pk for j in client.get("/jobs/?scope=mine&state=active").context["jobs"]] == [a.pk]
    assert [j.pk for j in client.get("/jobs/?q=bet").context["jobs"]] == [b.pk]
    assert [j.pk for j in client.get(f"/jobs/?q=%23{a.pk}").context["jobs"]] == [a.pk]
    bad = client.get("/jobs/?sort=drop_table")
    assert bad.status_code == 200 and "sort must be one of" in bad.content.decode()
    page = browser(alice).get("/jobs/?sort=-gpus").content.decode()
    assert '<option value="-gpus" selected>most GPUs</option>' in page and ">-id<" not in page


def test_the_jobs_table_shows_only_chosen_columns(alice, browser):
    submit(alice)
    body = browser(alice).get("/jobs/?cols=id&cols=state").content.decode()
    assert "<th>#</th><th>State</th></tr>" in body.replace("\n", "")


def test_the_jobs_table_needs_a_fixed_number_of_queries(alice, browser, django_assert_max_num_queries):
    for i in range(15):
        submit(alice, name=f"j{i}")
    run_cycle()
    client = browser(alice)
    with django_assert_max_num_queries(12):
        assert client.get("/jobs/").status_code == 200


def test_the_csv_download_has_every_matching_row_and_neutralizes_formulas(alice, charlie, browser):
    submit(alice, name="=HYPERLINK(\"http://evil\")")
    submit(charlie, name="nlp-secret", gpu_model="h100-80gb")
    response = browser(alice).get("/jobs.csv")
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert rows[0][:3] == ["id", "name", "team"]
    assert [r[1] for r in rows[1:]] == ["'=HYPERLINK(\"http://evil\")"]


def test_an_outsider_gets_404_on_every_job_page(alice, charlie, browser):
    job = submit(alice)
    client = browser(charlie)
    for url in [f"/jobs/{job.pk}/", f"/jobs/{job.pk}/log/", f"/jobs/{job.pk}/gpu-chart/"]:
        assert client.get(url).status_code == 404, url
    assert client.post(f"/jobs/{job.pk}/cancel/").status_code == 404
    assert "train-resnet" not in client.get("/jobs/").content.decode()
    job.refresh_from_db()
    assert job.state == "pending"


def test_a_team_mate_may_not_cancel_from_the_page(alice, bob, browser):
    job = submit(alice)
    assert browser(bob).post(f"/jobs/{job.pk}/cancel/").status_code == 403
    job.refresh_from_db()
    assert job.state == "pending"


def test_the_detail_page_escapes_names_and_commands(alice, browser):
    job = submit(alice, name="<script>alert(1)</script>", command="echo '<img src=x onerror=alert(1)>'")
    body = browser(alice).get(f"/jobs/{job.pk}/").content.decode()
    assert "<script>alert(1)</script>" not in body and "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert "<img src=x" not in body


def test_the_gpu_chart_plots_the_jobs_samples(alice, cluster, browser):
    job = submit(alice)
    run_cycle()
    alloc = job.allocations.get()
    GpuSample.objects.create(gpu=alloc.gpu, node=alloc.node, job=job, at=db_now(), util_pct=77.0, mem_used_mb=2048)
    body = browser(alice).get(f"/jobs/{job.pk}/gpu-chart/").content.decode()
    assert "node-h100/gpu0" in body and "77.0" in body
    empty = submit(alice, name="other")
    assert "No GPU samples yet" in browser(alice).get(f"/jobs/{empty.pk}/gpu-chart/").content.decode()


def test_the_gpu_chart_of_a_long_run_shows_its_latest_minutes_averaged(alice, cluster, browser, monkeypatch):
    import json
    from datetime import timedelta

    import scheduler.views

    monkeypatch.setattr(scheduler.views, "GPU_CHART_POINTS", 30)
    job = submit(alice)
    run_cycle()
    alloc = job.allocations.get()
    start = db_now().replace(second=0, microsecond=0) - timedelta(hours=2)
    GpuSample.objects.bulk_create(  # two hours, a sample every 20 s; the last minute at 50, 50 and 80%
        GpuSample(gpu=alloc.gpu, node=alloc.node, job=job, at=start + timedelta(seconds=20 * i),
                  util_pct=10.0 if i < 357 else 50.0 + 30 * (i == 359), mem_used_mb=1000 + i) for i in range(360))
    body = browser(alice).get(f"/jobs/{job.pk}/gpu-chart/").content.decode()
    figure = json.loads(body.split('type="application/json">', 1)[1].split("</script>", 1)[0])
    util = next(t for t in figure["data"] if t.get("yaxis", "y") == "y")
    assert len(util["x"]) == 30, "the newest 30 minutes"
    assert util["x"][-1].startswith((start + timedelta(minutes=119)).strftime("%Y-%m-%dT%H:%M"))
    assert util["y"][-1] == 60.0 and util["y"][0] == 10.0


def test_the_cluster_page_hides_other_teams_job_ids(alice, charlie, browser):
    job = submit(charlie, gpu_model="h100-80gb")
    run_cycle()
    body = browser(alice).get("/cluster/").content.decode()
    assert f"#{job.pk}<" not in body and "in use" in body
    assert f"#{job.pk}<" in browser(charlie).get("/cluster/").content.decode()


def test_the_cluster_page_shows_each_gpus_latest_utilization(alice, cluster, browser):
    from scheduler.models import Gpu

    Gpu.objects.filter(uuid="GPU-h100-2").update(last_sample_at=db_now(), util_pct=83.0, mem_used_mb=40960,
                                                 temperature_c=64)
    body = browser(alice).get("/cluster/").content.decode()
    assert "83% · 40/80 GiB · 64°C" in body


def test_a_down_node_shows_its_gpus_offline_with_no_stale_readings(alice, cluster, browser):
    from datetime import timedelta

    from scheduler.models import Gpu, Node

    node = cluster["nodes"][0]
    Gpu.objects.filter(node=node).update(last_sample_at=db_now(), util_pct=83.0, mem_used_mb=40960)
    Node.objects.filter(pk=node.pk).update(state=Node.DOWN, last_heartbeat_at=db_now() - timedelta(seconds=40))
    body = browser(alice).get("/cluster/").content.decode()
    section = body.split(f"<h2>{node.name}</h2>", 1)[1].split("</section>", 1)[0]
    assert "last heartbeat 40 s ago" in section or "last heartbeat 41 s ago" in section
    assert section.count(">offline<") == 4 and "free" not in section and "83%" not in section


def test_the_detail_page_says_when_a_waiting_job_should_start_in_the_reasons_words(alice, browser):
    from datetime import timedelta

    from scheduler.templatetags.rota_time import from_now

    job = submit(alice)
    Job.objects.filter(pk=job.pk).update(queue_position=1, estimated_start=db_now() + timedelta(hours=3))
    body = browser(alice).get(f"/jobs/{job.pk}/").content.decode()
    assert "Queue position 1 · estimated start" in body and "(in 3 h)" in body
    # Under a minute it says seconds (Django's timeuntil said "0 minutes"); once passed, "now".
    assert from_now(db_now() + timedelta(seconds=50.2)) in ("in 50 s", "in 49 s")
    assert from_now(db_now() - timedelta(seconds=5)) == "now" and from_now(None) == ""


def test_the_detail_page_asks_before_cancelling_and_says_plainly_what_a_finished_job_left(alice, browser):
    from scheduler.services.jobs import job_cancel

    job = submit(alice, name="it's <mine>")
    body = browser(alice).get(f"/jobs/{job.pk}/").content.decode()
    assert f"return confirm('Cancel job #{job.pk} (it\\u0027s \\u003Cmine\\u003E)?')" in body
    assert "(no output yet)" in body and "not set (node defaults)" in body
    job_cancel(user=alice, job=job)
    body = browser(alice).get(f"/jobs/{job.pk}/").content.decode()
    assert "(no output)" in body and "(no output yet)" not in body and "confirm(" not in body


def test_the_gpu_chart_draws_each_gpus_two_lines_in_one_colour_under_one_legend_entry():
    from datetime import UTC, datetime

    from scheduler.charts import gpu_usage_figure

    at = datetime(2026, 12, 1, tzinfo=UTC)
    fig = gpu_usage_figure([("n1/gpu0", at, 50.0, 2048.0), ("n1/gpu1", at, 10.0, 1024.0)])
    colours = [(t.name, t.line.color, t.showlegend is not False) for t in fig.data]
    assert [c[0] for c in colours] == ["n1/gpu0", "n1/gpu0", "n1/gpu1", "n1/gpu1"]
    assert colours[0][1] == colours[1][1] != colours[2][1] == colours[3][1]
    assert [c[2] for c in colours] == [True, False, True, False]
    assert list(fig.data[1].y) == [2.0]


def test_an_empty_jobs_table_says_whether_filters_hid_the_jobs(alice, browser):
    client = browser(alice)
    assert "No jobs yet." in client.get("/").content.decode()
    assert "No jobs yet." in client.get("/jobs/").content.decode()
    assert "No jobs match these filters." in client.get("/jobs/?state=running").content.decode()


def test_a_restarted_job_shows_the_last_attempts_output_until_the_new_one_writes(alice, browser):
    from scheduler.models import JobLog

    job = submit(alice, name="svc")
    Job.objects.filter(pk=job.pk).update(attempt=3)  # crashed twice; attempt 3 waits for its backoff
    JobLog.objects.create(job=job, attempt=1, content="first crash\n")
    JobLog.objects.create(job=job, attempt=2, content="Traceback: out of memory\n")
    body = browser(alice).get(f"/jobs/{job.pk}/").content.decode()
    assert "Attempt 3 has no output yet; this is attempt 2" in body and "Traceback: out of memory" in body
    assert "first crash" not in body
    JobLog.objects.create(job=job, attempt=3, content="serving on :8000\n")
    body = browser(alice).get(f"/jobs/{job.pk}/").content.decode()
    assert "serving on :8000" in body and "Traceback" not in body and "no output yet" not in body


def test_pages_say_their_time_zone_and_offer_a_skip_link(alice, browser):
    body = browser(alice).get("/jobs/").content.decode()
    assert "times in UTC" in body and 'href="#content">Skip to content' in body and '<main id="content">' in body
    assert '<div class="scroll"><table class="jobs">' in body  # a wide table scrolls inside its box on a phone


def test_removing_a_member_and_deleting_a_template_ask_first(alice, cluster, browser):
    from portal.models import Membership
    from scheduler.models.templates import JobTemplate
    from tests.factories import MembershipFactory, UserFactory

    bob = UserFactory(username="bob")
    MembershipFactory(user=bob, team=cluster["vision"], role=Membership.TEAM_ADMIN)
    JobTemplate.objects.create(team=cluster["vision"], name="nightly", fields={"gpus": 1})
    page = browser(bob).get("/teams/vision/").content.decode()
    assert "return confirm('Remove alice from team vision?" in page
    page = browser(bob).get("/teams/vision/templates/").content.decode()
    assert "return confirm('Delete template nightly?')" in page


def test_a_finance_account_is_told_it_submits_nothing_rather_than_to_ask_for_a_team(cluster, browser):
    from django.contrib.auth.models import Group

    from portal.access import FINANCE_GROUP
    from tests.factories import UserFactory

    fiona = UserFactory(username="fiona")
    fiona.groups.add(Group.objects.get_or_create(name=FINANCE_GROUP)[0])
    assert "they do not submit jobs" in browser(fiona).get("/jobs/new/").content.decode()
    assert "Finance accounts see no jobs" in browser(fiona).get("/jobs/").content.decode()


def test_the_cluster_page_pages_its_nodes_filters_by_pool_and_state_and_counts_them_all(alice, cluster, browser,
                                                                                        monkeypatch):
    import scheduler.views
    from scheduler.models import Node
    from tests.factories import NodeFactory, PoolFactory

    monkeypatch.setattr(scheduler.views, "CLUSTER_PAGE_NODES", 2)
    spare = PoolFactory(name="spare")
    for i in range(3):
        NodeFactory(name=f"spare-{i}", pool=spare, state=Node.DRAINED if i == 2 else Node.READY)
    client = browser(alice)
    job = submit(alice, gpus=2)
    run_cycle()
    assert job.allocations.count() == 2
    body = client.get("/cluster/").content.decode()
    total = Node.objects.count()
    assert f"{total} nodes" in body and "showing nodes 1–2" in body and f"page 1 of {(total + 1) // 2}" in body
    assert "6 GPUs: 2 in use, 0 unhealthy" in body  # the cluster fixture's 4 + 2 GPUs; the spare nodes have none
    body = client.get("/cluster/?pool=spare&page=2").content.decode()
    assert "3 nodes" in body and "<h2>spare-2</h2>" in body and "<h2>spare-0</h2>" not in body
    assert 'href="?pool=spare&amp;page=1"' in body and 'hx-get="/cluster/?pool=spare&amp;page=2"' in body
    body = client.get("/cluster/?pool=spare&state=drained").content.decode()
    assert "1 node ·" in body and "<h2>spare-2</h2>" in body and "spare-1" not in body
    assert "No nodes match these filters" in client.get("/cluster/?pool=spare&state=down").content.decode()


def test_the_gpu_chart_of_a_job_with_one_sample_is_readable():
    from datetime import UTC, datetime, timedelta

    from scheduler.charts import gpu_usage_figure

    at = datetime(2026, 12, 1, 3, 48, 39, tzinfo=UTC)
    fig = gpu_usage_figure([("n1/gpu0", at, 40.0, 0.0)])
    assert {t.mode for t in fig.data} == {"lines+markers"}, "one point is drawn"
    assert fig.layout.yaxis2.rangemode == "tozero"
    low, high = fig.layout.xaxis.range
    assert (low, high) == (at - timedelta(minutes=1), at + timedelta(minutes=1)), "minutes, not milliseconds"


def test_the_job_list_pages_through_every_row_and_keeps_the_page_on_refresh(alice, browser, monkeypatch):
    import re

    from scheduler import views

    monkeypatch.setattr(views, "PAGE_ROWS", 3)
    ids = [submit(alice, name=f"job-{i}").pk for i in range(7)]
    client = browser(alice)

    def shown(page):
        return [int(i) for i in re.findall(r'<td><a href="/jobs/(\d+)/">\d+</a></td>', page)]

    first = client.get("/jobs/").content.decode()
    assert shown(first) == ids[::-1][:3]
    assert "Rows 1–3 of 7 · page 1 of 3" in first and 'rel="prev"' not in first
    next_query = re.search(r'href="\?([^"]+)" rel="next"', first).group(1).replace("&amp;", "&")
    assert "page=2" in next_query
    second = client.get(f"/jobs/?{next_query}").content.decode()
    assert shown(second) == ids[::-1][3:6]
    assert 'hx-get="/jobs/?' in second and "page=2" in re.search(r'hx-get="([^"]+)"', second).group(1)
    last = client.get("/jobs/?page=3").content.decode()
    assert shown(last) == ids[:1] and "Rows 7–7 of 7" in last and 'rel="next"' not in last
    for far in ("99", "999999999", "999999999999999999"):
        past_the_end = client.get(f"/jobs/?page={far}").content.decode()
        assert shown(past_the_end) == ids[:1] and "page 3 of 3" in past_the_end


def test_the_live_refresh_redraws_the_rows_and_the_pager_together(alice, browser, monkeypatch):
    import re

    from scheduler import views

    monkeypatch.setattr(views, "PAGE_ROWS", 3)
    for i in range(4):
        submit(alice, name=f"job-{i}")
    client = browser(alice)
    page = client.get("/jobs/?page=2").content.decode()
    assert "Rows 4–4 of 4" in page and 'rel="next"' not in page
    for i in range(3):  # the table grows while the page is open
        submit(alice, name=f"late-{i}")
    refreshed = client.get(re.search(r'id="job-table" hx-get="([^"]+)"', page).group(1).replace("&amp;", "&"),
                           HTTP_HX_REQUEST="true").content.decode()
    assert refreshed.lstrip().startswith("<div id=\"job-table\"")
    assert "Rows 4–6 of 7 · page 2 of 3" in refreshed and 'rel="next"' in refreshed


def test_the_jobs_csv_refuses_a_bad_filter_instead_of_giving_every_row(alice, browser):
    submit(alice)
    response = browser(alice).get("/jobs.csv?kind=zzz")
    assert response.status_code == 400
    assert "kind must be one of" in response.content.decode()


@pytest.mark.parametrize(("query", "message"), [
    ("page=0", "page must be a whole number, 1 or more"),
    ("page=abc", "page must be a whole number, 1 or more"),
    ("page=%D9%A3", "page must be a whole number, 1 or more"),  # an Arabic-Indic three
    ("kind=zzz", "kind must be one of training, inference, notebook"),
    ("team=nlp", "team must be one of yours"),  # alice is in vision only
])
def test_the_job_list_names_a_bad_page_or_kind_and_shows_the_first_page(alice, browser, query, message):
    submit(alice)
    page = browser(alice).get(f"/jobs/?{query}").content.decode()
    assert message in page
    assert "train-resnet" in page


def test_the_job_list_counts_only_so_far_ahead_and_then_says_more_than(alice, browser, monkeypatch):
    from scheduler import views

    monkeypatch.setattr(views, "PAGE_ROWS", 2)
    monkeypatch.setattr(views, "COUNT_AHEAD", 3)
    for i in range(8):
        submit(alice, name=f"job-{i}")
    client = browser(alice)
    first = client.get("/jobs/").content.decode()
    assert "Rows 1–2 of more than 3 · page 1</span>" in first and 'rel="next"' in first
    assert "Rows 5–6 of more than 7 · page 3</span>" in client.get("/jobs/?page=3").content.decode()
    last = client.get("/jobs/?page=4").content.decode()  # rows 7 to 9 are counted: the end is in sight
    assert "Rows 7–8 of 8 · page 4 of 4" in last and 'rel="next"' not in last
    assert "Rows 7–8 of 8 · page 4 of 4" in client.get("/jobs/?page=9").content.decode()
