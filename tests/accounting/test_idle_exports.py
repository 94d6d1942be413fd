"""Idle cost in the chargeback exports and on the dashboard, under each ``ROTA_IDLE_COST_POLICY``.

October holds one vision hour on an h100 (4.00/h): idle h100 = 4 GPUs × 744 h − 1 h = 2975 h × 4.00 = 11900.00,
idle a100 = 2 × 744 h × 2.50 = 3720.00; 15620.00 in all, and under ``share`` vision (the only cost) gets it all.
"""

import csv
import io
from decimal import Decimal

import pytest
from openpyxl import load_workbook

from tests.accounting.test_api_chargeback import fetch, pages
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def root():
    return UserFactory(username="root", is_staff=True)


def csv_rows(client, month="2026-10"):
    _, body = fetch(client, month=month, format="csv")
    return list(csv.DictReader(io.StringIO(body.decode())))


def test_separate_adds_idle_rows_per_gpu_model(api, root, usage):
    idle = [r for r in csv_rows(api(root)) if r["kind"] == "idle"]
    assert [(r["team"], r["gpu_model"], r["gpus"], r["allocated_gpu_hours"], r["cost"]) for r in idle] == [
        ("(idle)", "a100-40gb", "2", "1488.000000", "3720.00"),
        ("(idle)", "h100-80gb", "4", "2975.000000", "11900.00"),
    ]


def test_a_member_gets_no_idle_line_under_separate(api, alice, usage):
    assert [r for r in csv_rows(api(alice)) if r["kind"] == "idle"] == []


def test_share_hands_the_idle_cost_to_the_teams(api, root, alice, charlie, usage, settings):
    settings.ROTA_IDLE_COST_POLICY = "share"
    idle = [(r["team"], r["job"], r["cost"]) for r in csv_rows(api(root)) if r["kind"] == "idle"]
    assert idle == [("vision", "idle share", "15620.00")]
    assert [r["cost"] for r in csv_rows(api(alice)) if r["kind"] == "idle"] == ["15620.00"]
    assert [r for r in csv_rows(api(charlie)) if r["kind"] == "idle"] == []  # nlp had no October cost


def test_shares_follow_allocated_cost_and_add_up(api, root, usage, settings):
    settings.ROTA_IDLE_COST_POLICY = "share"
    rows = csv_rows(api(root), month="2026-11")
    shares = {r["team"]: Decimal(r["cost"]) for r in rows if r["kind"] == "idle"}
    settings.ROTA_IDLE_COST_POLICY = "separate"
    total = sum(Decimal(r["cost"]) for r in csv_rows(api(root), month="2026-11") if r["kind"] == "idle")
    costs = {t: sum(Decimal(r["cost"]) for r in rows if r["team"] == t and r["kind"] != "idle") for t in shares}
    assert set(shares) == {"vision", "nlp"}
    assert abs(sum(shares.values()) - total) <= Decimal("0.05")  # the month is still running: seconds apart
    assert float(shares["vision"] / shares["nlp"]) == pytest.approx(float(costs["vision"] / costs["nlp"]), rel=1e-3)


def test_hide_leaves_idle_out(api, root, usage, settings):
    settings.ROTA_IDLE_COST_POLICY = "hide"
    assert [r for r in csv_rows(api(root)) if r["kind"] == "idle"] == []


def test_the_xlsx_summary_has_an_idle_line_and_a_fairness_sheet(api, root, usage):
    _, body = fetch(api(root), month="2026-10", format="xlsx")
    wb = load_workbook(io.BytesIO(body))
    summary = [list(r) for r in wb["Summary by team"].iter_rows(min_row=2, values_only=True)]
    assert summary[-1] == ["2026-10", None, "(idle)", 4463.0, 0, 15620.0, 0, 15620.0]
    fairness = wb["Fairness"]
    assert fairness.freeze_panes == "A2"
    teams = [(r[1], r[2]) for r in fairness.iter_rows(min_row=2, values_only=True)]
    assert ("vision", "(all models)") in teams and ("nlp", "h100-80gb") in teams


def test_the_xlsx_summary_carries_the_share_under_share(api, alice, usage, settings):
    settings.ROTA_IDLE_COST_POLICY = "share"
    _, body = fetch(api(alice), month="2026-10", format="xlsx")
    summary = [list(r) for r in load_workbook(io.BytesIO(body))["Summary by team"].iter_rows(values_only=True)]
    assert summary[1] == ["2026-10", "vision", "vision", 1.0, 4.0, 15620.0, 0, 15624.0]
    assert len(summary) == 2  # no separate idle line
    fairness = load_workbook(io.BytesIO(body))["Fairness"]
    assert {r[1] for r in fairness.iter_rows(min_row=2, values_only=True)} == {"vision"}


def test_the_pdf_statement_keeps_one_page_per_team_with_the_new_sections(api, root, usage, settings):
    settings.ROTA_IDLE_COST_POLICY = "share"
    _, body = fetch(api(root), month="2026-11", format="pdf")
    assert pages(body) == 2


def test_the_dashboard_shows_idle_to_finance_and_not_to_members(client, root, alice, usage):
    client.force_login(root)
    html = client.get("/accounting/", {"preset": "custom", "start": "2026-10-01", "end": "2026-10-31"}).content.decode()
    assert 'id="fig-idle"' in html and "15620.00" in html
    client.force_login(alice)
    html = client.get("/accounting/", {"preset": "custom", "start": "2026-10-01", "end": "2026-10-31"}).content.decode()
    assert 'id="fig-idle"' not in html and "15620.00" not in html


def test_the_dashboard_shows_a_members_idle_share_under_share(client, alice, usage, settings):
    settings.ROTA_IDLE_COST_POLICY = "share"
    client.force_login(alice)
    html = client.get("/accounting/", {"preset": "custom", "start": "2026-10-01", "end": "2026-10-31"}).content.decode()
    assert "cost with idle share" in html and "15624.00" in html


def test_a_bad_policy_setting_fails_at_start(settings):
    from django.apps import apps
    from django.core.exceptions import ImproperlyConfigured

    settings.ROTA_IDLE_COST_POLICY = "spread"
    with pytest.raises(ImproperlyConfigured, match="ROTA_IDLE_COST_POLICY must be one of hide, separate, share"):
        apps.get_app_config("accounting").ready()
