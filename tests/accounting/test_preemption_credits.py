"""The work a preemption lost, credited back in chargeback (rule: accounting/credits.py): a credit line in
the CSV, the XLSX (summary and job detail) and the PDF statement, for the victim's team only.

In November alice's 2-GPU resnet job was preempted after 10 h; it had saved its work 30 min before its
processes were gone: 2 GPUs × 1800 s = 1 GPU-hour lost, at the h100's 4.00 a GPU-hour: a credit of -4.00."""

import base64
import csv
import io
import re
import zlib
from datetime import timedelta
from decimal import Decimal

import pytest
from openpyxl import load_workbook

from accounting.credits import LostWork, credit_lines
from accounting.rating import RateCardVersion
from scheduler.models import Preemption
from tests.accounting.conftest import NOV
from tests.accounting.test_api_chargeback import fetch
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db
DONE = NOV + timedelta(days=3, hours=10)


@pytest.fixture
def credited(usage):
    """The fixture's preemption of resnet, completed: 1 GPU-hour lost since its checkpoint."""
    Preemption.objects.filter(job=usage["train"]).update(
        completed_at=DONE, work_since=DONE - timedelta(minutes=30), gpu_seconds_lost=3600.0)
    return usage


def rows(client, month="2026-11"):
    _, body = fetch(client, month=month, format="csv")
    return list(csv.DictReader(io.StringIO(body.decode())))


def test_the_csv_has_a_credit_line_with_the_right_amount(api, alice, credited):
    [line] = [r for r in rows(api(alice)) if r["kind"] == "preemption-credit"]
    assert (line["team"], line["gpu_model"], line["allocated_gpu_hours"], line["rate"], line["cost"]) == (
        "vision", "h100-80gb", "-1.000000", "4.0000", "-4.00")
    assert line["job_id"] == str(credited["train"].pk) and "resnet" in line["job"]
    total = sum(Decimal(r["cost"]) for r in rows(api(alice)) if r["team"] == "vision")
    assert total == Decimal("82.50") - Decimal("4.00")


def test_an_estimate_is_not_credited_until_the_preemption_completed(api, alice, usage):
    assert [r for r in rows(api(alice)) if r["kind"] == "preemption-credit"] == []


def test_another_team_sees_no_credit_of_vision(api, charlie, credited):
    assert [r for r in rows(api(charlie)) if r["kind"] == "preemption-credit"] == []


def test_the_xlsx_summary_and_detail_carry_the_credit(api, alice, credited):
    _, body = fetch(api(alice), month="2026-11", format="xlsx")
    wb = load_workbook(io.BytesIO(body))
    summary = [list(r) for r in wb["Summary by team"].iter_rows(values_only=True)]
    assert summary[0][6:] == ["preemption_credit", "total_cost"]
    assert summary[1] == ["2026-11", "vision", "vision", 21.0, 82.5, 0, -4.0, 78.5]
    detail = [r for r in wb["Job detail"].iter_rows(min_row=2, values_only=True) if r[5] == "preemption-credit"]
    assert [(r[2], r[8], r[11]) for r in detail] == [("vision", -1.0, -4.0)]


def pdf_text(body: bytes) -> bytes:
    """The PDF's page content streams, decoded (reportlab writes them ASCII85 + Flate encoded)."""
    out = []
    for data in re.findall(rb"stream\r?\n(.*?)endstream", body, re.DOTALL):
        data = data.strip()
        try:
            out.append(zlib.decompress(base64.a85decode(data[:-2]) if data.endswith(b"~>") else data))
        except (ValueError, zlib.error):
            continue
    return b"".join(out)


def test_the_pdf_statement_lists_the_lost_work_and_the_credit(api, alice, credited):
    _, body = fetch(api(alice), month="2026-11", format="pdf", team="vision")
    text = pdf_text(body)
    assert b"(Work lost to preemption \\(credited\\))" in text
    assert b"(Credit)" in text and b"(-4.00 USD)" in text and b"(78.50 USD)" in text  # 82.50 - 4.00


def test_the_stored_statement_carries_the_credit(credited):
    from accounting.models import Statement
    from accounting.services_billing import statements_store

    assert statements_store(month_start=NOV.date()) >= 2
    vision = Statement.objects.get(team__name="vision", format="xlsx")
    summary = [list(r) for r in load_workbook(io.BytesIO(bytes(vision.content)))["Summary by team"].iter_rows(
        values_only=True)]
    assert summary[1][6:] == [-4.0, 78.5]


def test_the_credit_is_priced_by_the_card_in_force_when_the_preemption_completed():
    old = RateCardVersion(1, NOV - timedelta(days=60), {"h100-80gb": Decimal("4.00")})
    new = RateCardVersion(2, NOV, {"h100-80gb": Decimal("6.00")}, currency="EUR")
    lost = LostWork(1, NOV + timedelta(hours=1), "vision", "research", "alice", 7, "train", 1, "h100-80gb",
                    Decimal(5400))
    [line] = credit_lines([lost], [old, new])
    assert (line.rate, line.card_version, line.credit, line.currency) == (Decimal("6.00"), 2, Decimal("-9.00"), "EUR")
    [unpriced] = credit_lines([LostWork(2, NOV, "nlp", "nlp", "c", 8, "x", 1, "l4-24gb", Decimal(60))], [new])
    assert unpriced.credit == 0


def test_finance_sees_every_teams_credit(api, credited):
    from django.contrib.auth.models import Group

    fiona = UserFactory(username="fiona")
    fiona.groups.add(Group.objects.get_or_create(name="finance")[0])
    assert [r["team"] for r in rows(api(fiona)) if r["kind"] == "preemption-credit"] == ["vision"]


def test_the_fairness_statement_shows_the_lost_work_credited(api, client, alice, charlie, credited):
    body = api(alice).get("/api/v1/reports/fairness/", {"month": "2026-11"}).json()
    [vision] = [t for t in body["results"] if t["team"] == "vision"]
    assert vision["lost_gpu_hours"] == pytest.approx(1.0)
    assert {ln["gpu_model"]: ln["lost_gpu_hours"] for ln in vision["lines"]}["h100-80gb"] == pytest.approx(1.0)
    nlp = api(charlie).get("/api/v1/reports/fairness/", {"month": "2026-11"}).json()["results"]
    assert [t["lost_gpu_hours"] for t in nlp] == [0.0]
    _, xlsx = fetch(api(alice), month="2026-11", format="xlsx")
    sheet = load_workbook(io.BytesIO(xlsx))["Fairness"]
    header, *lines = list(sheet.iter_rows(values_only=True))
    assert header[-1] == "lost_to_preemption_gpu_hours"
    assert [r[-1] for r in lines if r[2] == "(all models)"] == [pytest.approx(1.0)]
    client.force_login(alice)
    page = client.get("/accounting/", {"preset": "custom", "start": "2026-11-01", "end": "2026-11-30"})
    assert "Lost to preemption GPU-h (credited)" in page.content.decode()
