"""GET /api/v1/reports/chargeback/: CSV, XLSX and PDF, formulas neutralized, tenancy, bad months."""

import csv
import io
import re
from decimal import Decimal

import pytest
from openpyxl import load_workbook

from accounting.api import FORMATS
from portal.csvutil import neutralize as safe_cell
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db
URL = "/api/v1/reports/chargeback/"


def pages(pdf: bytes) -> int:
    return int(re.search(rb"/Count (\d+)", pdf).group(1))


def fetch(client, **params):
    response = client.get(URL, params)
    body = b"".join(response.streaming_content) if response.streaming else response.content
    return response, body


def test_it_neutralizes_spreadsheet_formulas():
    assert safe_cell("=HYPERLINK(1)") == "'=HYPERLINK(1)"
    for text in ("+1", "-1", "@SUM(A1)", "\tx", "\rx"):
        assert safe_cell(text) == "'" + text
    assert safe_cell("resnet") == "resnet" and safe_cell(3) == 3


def test_it_streams_a_csv_with_the_member_s_team_rows_only(api, alice, usage):
    response, body = fetch(api(alice), month="2026-11", format="csv")
    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"].startswith("text/csv")
    assert 'filename="rota-chargeback-2026-11.csv"' in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(body.decode())))
    assert list(rows[0])[:12] == [
        "period",
        "department",
        "team",
        "user",
        "job",
        "kind",
        "gpu_model",
        "gpus",
        "allocated_gpu_hours",
        "rate",
        "rate_card_version",
        "cost",
    ]
    assert {r["team"] for r in rows} == {"vision"}
    by_job = {r["job"]: r for r in rows}
    assert set(by_job) == {"resnet", '\'=HYPERLINK("http://x.example","click")'}
    resnet = by_job["resnet"]
    assert (resnet["period"], resnet["gpus"], resnet["rate_card_version"]) == ("2026-11", "2", "1")
    assert Decimal(resnet["allocated_gpu_hours"]) == 20 and Decimal(resnet["cost"]) == Decimal("80.00")


def test_an_outsider_sees_none_of_another_team_s_rows(api, charlie, usage):
    _, body = fetch(api(charlie), month="2026-11", format="csv")
    rows = list(csv.DictReader(io.StringIO(body.decode())))
    assert [(r["team"], r["job"], r["gpus"], r["cost"]) for r in rows] == [("nlp", "nlp-notebook", "0.250", "4.00")]
    assert fetch(api(charlie), month="2026-11", team="vision")[0].status_code == 404


def test_a_user_in_no_team_gets_only_the_header(api, usage):
    _, body = fetch(api(UserFactory(username="dave")), month="2026-11", format="csv")
    assert body.decode().strip().count("\n") == 0


def test_staff_see_every_team(api, usage):
    _, body = fetch(api(UserFactory(username="root", is_staff=True)), month="2026-11")
    assert {r["team"] for r in csv.DictReader(io.StringIO(body.decode()))} == {"vision", "nlp", "(idle)"}


def test_the_xlsx_reads_back_with_five_sheets_frozen_headers_and_text_formulas(api, alice, usage):
    response, body = fetch(api(alice), month="2026-11", format="xlsx")
    assert response.status_code == 200
    wb = load_workbook(io.BytesIO(body))
    assert wb.sheetnames == ["Summary by team", "By user", "Job detail", "Rate card", "Fairness"]
    summary = wb["Summary by team"]
    assert summary.freeze_panes == "A2"
    assert [c.value for c in summary[2]] == ["2026-11", "vision", "vision", 21.0, 82.5, 0, 0, 82.5]  # no idle, credit
    assert summary["E2"].number_format == "#,##0.00"
    detail = wb["Job detail"]
    names = [row[4] for row in detail.iter_rows(min_row=2, values_only=True)]
    assert '\'=HYPERLINK("http://x.example","click")' in names
    assert all(c.data_type != "f" for row in detail.iter_rows() for c in row)
    assert [c.value for c in wb["Rate card"][1]][:4] == [
        "rate_card_version",
        "effective_from",
        "gpu_model",
        "price_per_gpu_hour",
    ]


def test_the_pdf_is_a_statement_with_pages(api, alice, usage):
    response, body = fetch(api(alice), month="2026-11", format="pdf")
    assert response.status_code == 200 and response["Content-Type"] == "application/pdf"
    assert body.startswith(b"%PDF") and pages(body) == 1


def test_staff_get_a_pdf_page_per_team(api, usage):
    _, body = fetch(api(UserFactory(username="root", is_staff=True)), month="2026-11", format="pdf")
    assert pages(body) == 2


@pytest.mark.parametrize("month", ["2026-13", "11-2026", "", "2026-1", "abc"])
def test_a_bad_month_is_a_400_naming_month_and_the_format(api, alice, month):
    response = api(alice).get(URL, {"month": month, "format": "csv"})
    assert response.status_code == 400
    assert "month" in response.json()["errors"] and "YYYY-MM" in response.json()["errors"]["month"][0]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("month", ["9999-12", "1969-12", "0000-01"])
def test_a_month_out_of_range_is_a_400_naming_month_and_the_range(api, alice, month, fmt):
    response = api(alice).get(URL, {"month": month, "format": fmt})
    assert response.status_code == 400
    assert "from 1970-01 to 9998-12" in response.json()["errors"]["month"][0]


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_last_month_in_range_is_an_empty_statement(api, alice, usage, fmt):
    response, body = fetch(api(alice), month="9998-12", format=fmt)
    assert response.status_code == 200 and body


def test_a_bad_format_is_a_400(api, alice):
    assert api(alice).get(URL, {"month": "2026-11", "format": "docx"}).status_code == 400


def test_anonymous_requests_are_refused(api):
    assert api().get(URL, {"month": "2026-11"}).status_code in (401, 403)


def test_token_auth_works(alice, usage):
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=alice).key}")
    assert fetch(client, month="2026-11")[0].status_code == 200


def test_a_member_sees_teammates_as_other_members_and_a_team_admin_sees_names(api, bob, cluster, usage):
    from portal.models import Membership

    _, body = fetch(api(bob), month="2026-11")
    assert {r["user"] for r in csv.DictReader(io.StringIO(body.decode()))} == {"(other members)"}
    lead = UserFactory(username="lead")
    Membership.objects.create(user=lead, team=cluster["vision"], role=Membership.TEAM_ADMIN)
    _, body = fetch(api(lead), month="2026-11")
    assert {(r["team"], r["user"]) for r in csv.DictReader(io.StringIO(body.decode()))} == {("vision", "alice")}
