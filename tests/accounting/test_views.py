"""The accounting dashboard: charts with local Plotly, tenancy, budgets, presets, a query-count ceiling."""

import json
import re
from datetime import timedelta
from decimal import Decimal
from html import unescape

import pytest

from accounting.models import Budget
from accounting.services import usage_rollup
from scheduler.models import Job
from scheduler.services.common import db_now
from tests.accounting.helpers import T0, allocate, history, make_job
from tests.assets import external_assets
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db
URL = "/accounting/"
NOVEMBER = {"preset": "custom", "start": "2026-11-01", "end": "2026-11-30"}


def test_it_renders_charts_with_the_local_plotly_bundle(client, alice, usage, django_assert_max_num_queries):
    client.force_login(alice)
    with django_assert_max_num_queries(28):  # (two read up to where the ledger's days are summed: usage, idle;
        # one the work preemption lost, for the fairness statement)
        response = client.get(URL, NOVEMBER)
    assert response.status_code == 200
    html = response.content.decode()
    assert "/static/vendor/plotly/plotly.min.js" in html and external_assets(html) == []
    for fig in ("fig-usage", "fig-cost", "fig-by_model", "fig-by_kind", "fig-top_jobs", "fig-waste"):
        assert f'id="{fig}"' in html
    assert "resnet" in html and "82.50" in html
    assert "nlp-notebook" not in html  # another team's job


def test_the_json_in_the_page_cannot_break_out_of_its_script_tag(client, alice, cluster, usage):
    job = make_job(alice, cluster["vision"], name="</script><script>alert(1)</script>")
    allocate(job, "GPU-h100-3", usage["train"].allocations.first().started_at, None)
    usage_rollup(until=usage["train"].allocations.first().ended_at)
    client.force_login(alice)
    html = client.get(URL, {**NOVEMBER, "group_by": "user"}).content.decode()
    assert "<script>alert(1)" not in html


def test_an_outsider_sees_only_their_own_team(client, charlie, usage):
    client.force_login(charlie)
    html = client.get(URL, {**NOVEMBER, "group_by": "team"}).content.decode()
    assert "nlp-notebook" in html and "resnet" not in html and "vision" not in html


def test_a_user_in_no_team_sees_no_usage(client, usage):
    client.force_login(UserFactory(username="dave"))
    html = client.get(URL, NOVEMBER).content.decode()
    assert "No usage in this range" in html and "resnet" not in html
    # the empty tables say what is empty; nothing was filtered but the range
    assert '<td colspan="3" class="muted">No usage in this range.</td>' in html
    assert '<td colspan="4" class="muted">No jobs used GPUs in this range.</td>' in html
    assert "No jobs match" not in html


def figure(html: str, name: str) -> dict:
    return json.loads(unescape(re.search(rf'id="{name}" type="application/json">(.*?)</script>', html).group(1)))


def test_small_amounts_read_alike_in_tiles_tables_and_charts(client, alice, cluster):
    """Nine seconds on an h100 at 4.00/h: 0.0025 GPU-hours for 0.01; the job queued 84 s (0.023 h) first."""
    from accounting.services_billing import rate_card_create

    rate_card_create(version=1, effective_from=T0 - timedelta(days=30), prices={"h100-80gb": Decimal("4.00")})
    job = make_job(alice, cluster["vision"], name="blink")
    allocate(job, "GPU-h100-0", T0, T0 + timedelta(seconds=9))
    history(job, ("pending", T0 - timedelta(seconds=84)), ("admitted", T0), ("running", T0))
    usage_rollup(until=T0 + timedelta(hours=1))
    client.force_login(alice)
    html = client.get(URL, NOVEMBER).content.decode()
    assert "<b>0.0025</b><span>GPU-hours</span>" in html and "<b>0.01</b><span>cost (USD)</span>" in html
    assert '<td>vision</td><td class="num">0.0025</td><td class="num">0.01</td>' in html
    assert '<td class="num">0.0025</td><td class="num">0.01</td></tr>' in html.split("Top jobs by cost")[1]
    assert '<td>vision</td><td class="num">0</td><td class="num">0</td><td class="num">0.023</td>' in html
    queued = next(t for t in figure(html, "fig-waste")["data"] if t["name"] == "hours queued")
    assert queued["customdata"] == ["0.023"] and "%{customdata}" in queued["hovertemplate"]
    [usage_bar] = figure(html, "fig-usage")["data"]
    assert usage_bar["customdata"] == ["0.0025"]
    [cost_bar] = figure(html, "fig-cost")["data"]
    assert cost_bar["customdata"] == ["0.01"]


@pytest.mark.parametrize(
    ("group_by", "agg"),
    [
        ("team", "day"),
        ("department", "week"),
        ("user", "month"),
        ("kind", "day"),
        ("gpu_model", "week"),
        ("pool", "month"),
    ],
)
def test_every_grouping_and_aggregation_renders(client, alice, usage, group_by, agg):
    client.force_login(alice)
    assert client.get(URL, {**NOVEMBER, "group_by": group_by, "agg": agg}).status_code == 200


@pytest.mark.parametrize("preset", ["7d", "30d", "90d", "this-month", "last-month"])
def test_presets_render(client, alice, preset):
    client.force_login(alice)
    assert client.get(URL, {"preset": preset}).status_code == 200


def messages(response) -> list[str]:
    """The error messages above the form, as a person reads them."""
    html = response.content.decode()
    return [unescape(m) for m in re.findall(r'<li class="msg error">(.*?)</li>', html)]


def test_bad_parameters_fall_back_with_a_message(client, alice):
    client.force_login(alice)
    response = client.get(URL, {"preset": "custom", "start": "nope", "end": "2026-01-01", "group_by": "x"})
    assert messages(response) == [
        "Group by must be one of team, department, user, kind, gpu_model, pool; got 'x'",
        "From must be a day as YYYY-MM-DD from 1970-01-01 to 9998-12-31; got 'nope'",
    ]
    assert 'value="30d" selected' in response.content.decode()


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"agg": "hour"}, "Aggregate by must be one of day, week, month; got 'hour'"),
        ({"preset": "fortnight"}, "Range must be one of 7d, 30d, 90d, this-month, last-month, custom; got 'fortnight'"),
        (
            {"preset": "custom", "end": "2026-11-30"},
            "From is required: a day as YYYY-MM-DD from 1970-01-01 to 9998-12-31",
        ),
        (
            {"preset": "custom", "start": "2026-11-30", "end": "2026-11-01"},
            "To must not be before the first day, 2026-11-30; got 2026-11-01",
        ),
        (
            {"preset": "custom", "start": "2020-01-01", "end": "2026-11-01"},
            "To must be at most three years after the first day, 2020-01-01; got 2026-11-01",
        ),
    ],
)
def test_each_bad_parameter_is_named_as_the_form_labels_it(client, alice, params, message):
    client.force_login(alice)
    assert messages(client.get(URL, params)) == [message]


@pytest.mark.parametrize("agg", ["day", "week", "month"])
def test_days_out_of_range_fall_back_with_a_message_naming_the_range(client, alice, agg):
    client.force_login(alice)
    response = client.get(URL, {"preset": "custom", "start": "9999-12-01", "end": "9999-12-31", "agg": agg})
    assert response.status_code == 200
    assert messages(response) == [
        "From must be a day as YYYY-MM-DD from 1970-01-01 to 9998-12-31; got '9999-12-01'",
        "To must be a day as YYYY-MM-DD from 1970-01-01 to 9998-12-31; got '9999-12-31'",
    ]
    last = client.get(URL, {"preset": "custom", "start": "9998-12-01", "end": "9998-12-31", "agg": agg})
    assert last.status_code == 200 and messages(last) == []


def test_it_warns_when_a_team_nears_its_budget(client, alice, cluster):
    from accounting.services_billing import rate_card_create

    now = db_now()
    rate_card_create(version=1, effective_from=now - timedelta(days=400), prices={"h100-80gb": Decimal("4.00")})
    job = make_job(alice, cluster["vision"])
    start = max(now.replace(day=1, hour=0, minute=0, second=0, microsecond=0), now - timedelta(hours=2))
    allocate(job, "GPU-h100-0", start, None)
    usage_rollup()
    Budget.objects.create(team=cluster["vision"], unit=Budget.GPU_HOURS, amount=Decimal("0.001"), warn_percent=80)
    Budget.objects.create(team=cluster["nlp"], unit=Budget.MONEY, amount=Decimal(100))
    client.force_login(alice)
    html = client.get(URL).content.decode()
    assert 'id="budgets"' in html and "over budget" in html
    assert "nlp" not in html.split('id="budgets"')[1].split("</section>")[0]


def test_anonymous_users_are_sent_to_login(client):
    assert client.get(URL).status_code == 302


def test_the_query_count_does_not_grow_with_the_number_of_jobs(
    client, alice, cluster, usage, django_assert_max_num_queries
):
    start = usage["train"].allocations.first().started_at
    for i in range(25):
        job = make_job(
            alice, cluster["vision"], name=f"sweep-{i}", kind="evaluation", state="failed" if i % 5 else "succeeded"
        )
        at = start + timedelta(hours=20 + i)
        allocate(job, "GPU-a100-1", at, at + timedelta(minutes=30))
        history(
            job,
            ("pending", at - timedelta(minutes=i)),
            ("admitted", at),
            ("running", at),
            ("failed", at + timedelta(minutes=30)),
        )
        Job.objects.filter(pk=job.pk).update(finished_at=at + timedelta(minutes=30))
    usage_rollup(until=start + timedelta(days=5), full=True)  # backdated rows: a repair run picks them up
    client.force_login(alice)
    with django_assert_max_num_queries(28):  # (two read up to where the ledger's days are summed: usage, idle;
        # one the work preemption lost, for the fairness statement)
        html = client.get(URL, {**NOVEMBER, "group_by": "user"}).content.decode()
    assert "sweep-" in html
    for fig in ("fig-wait", "fig-failures", "fig-queue", "fig-fairness", "fig-efficiency"):
        assert f'id="{fig}"' in html
    # the query ceiling is 25, not 14: the fairness statement, idle cost and the queue charts read 7 fixed inputs
    # (visible teams, GPU capacity, every team's allocated GPU-seconds, quotas, allocations, jobs' first
    # admission, finished jobs by state); the transitions are read once for the queue, waste and fairness;
    # each of the two usage queries first reads the rate cards (a CASE picks each row's card, not a subquery)


def test_the_fairness_wait_and_failure_sections_show_only_your_team(client, alice, charlie, cluster, usage):
    start = usage["train"].allocations.first().started_at
    mine = make_job(alice, cluster["vision"], name="mine", state="failed")
    history(mine, ("pending", start - timedelta(hours=3)), ("admitted", start - timedelta(hours=1)))
    Job.objects.filter(pk=mine.pk).update(finished_at=start)
    theirs = make_job(charlie, cluster["nlp"], name="theirs", state="succeeded")
    history(theirs, ("pending", start), ("admitted", start + timedelta(minutes=6)))
    Job.objects.filter(pk=theirs.pk).update(finished_at=start + timedelta(hours=1))
    client.force_login(alice)
    html = client.get(URL, NOVEMBER).content.decode()
    fairness = html.split('id="fairness"')[1].split("</section>")[0]
    waits = html.split('id="waits"')[1].split("</section>")[0]
    assert "vision" in fairness and "nlp" not in fairness
    assert '<td>vision</td><td class="num">1</td><td class="num">120.0</td>' in waits  # 2 h to admission
    assert "100%" in waits and "nlp" not in waits
    assert 'id="fig-queue"' in html
    client.force_login(charlie)
    html = client.get(URL, NOVEMBER).content.decode()
    waits = html.split('id="waits"')[1].split("</section>")[0]
    assert '<td>nlp</td><td class="num">1</td><td class="num">6.0</td>' in waits and "vision" not in waits


def test_the_header_names_the_last_day_a_preset_covers(client, alice, usage):
    from datetime import date

    from accounting import periods

    client.force_login(alice)
    html = client.get(URL, {"preset": "this-month"}).content.decode()
    month = periods.preset_range("this-month", date.today())
    assert f"{month.start:%Y-%m-%d} to {month.last_day:%Y-%m-%d}" in html
    assert f"to {month.end:%Y-%m-%d}" not in html  # the first day of next month is not in it


def test_usage_on_a_model_with_no_price_is_called_out(client, alice, cluster, usage):
    from tests.factories import GpuFactory, GpuModelFactory

    client.force_login(alice)
    assert "No price on the rate card" not in client.get(URL, NOVEMBER).content.decode()  # all priced
    sliced = GpuModelFactory(name="a100-1g.10gb", memory_mb=9728, is_mig_profile=True)
    gpu = GpuFactory(node=cluster["nodes"][1], index=7, model=sliced, memory_mb=9728, uuid="MIG-x")
    job = make_job(alice, cluster["vision"], name="on-a-slice")
    start = usage["train"].allocations.first().started_at
    allocate(job, gpu, start, start + timedelta(hours=3))
    usage_rollup(until=start + timedelta(days=20), full=True)
    page = client.get(URL, NOVEMBER).content.decode()
    assert "No price on the rate card for a100-1g.10gb (3.00 GPU-h)" in page


def test_the_portals_database_sessions_run_without_jit(db):
    """JIT compilation cost the accounting reports 9 of their 10 seconds at 50k ledger rows (scale review)."""
    from django.db import connection

    assert "-c jit=off" in connection.settings_dict["OPTIONS"]["options"]  # ours, not the server's default
    with connection.cursor() as cursor:
        cursor.execute("SHOW jit")
        assert cursor.fetchone()[0] == "off"
