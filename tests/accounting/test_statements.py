"""Monthly statements: stored per team once a month closes, downloadable only by that team."""

from datetime import date, datetime, timedelta
from io import BytesIO

import pytest
from openpyxl import load_workbook

from accounting.models import Statement
from accounting.services import usage_rollup
from accounting.services_billing import statements_close_month
from portal.models import Membership
from tests.accounting.conftest import NOV
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db
DEC_1 = datetime(2026, 12, 1, tzinfo=NOV.tzinfo)


def test_it_stores_statements_once_the_month_has_closed(usage):
    assert statements_close_month(now=DEC_1 + timedelta(minutes=5)) == 0  # ledger not yet past the month
    usage_rollup(until=DEC_1 + timedelta(hours=2))
    assert statements_close_month(now=DEC_1 + timedelta(hours=2)) == 4
    assert statements_close_month(now=DEC_1 + timedelta(hours=3)) == 0
    assert sorted(Statement.objects.values_list("team__name", "format")) == [
        ("nlp", "pdf"),
        ("nlp", "xlsx"),
        ("vision", "pdf"),
        ("vision", "xlsx"),
    ]
    assert set(Statement.objects.values_list("month", flat=True)) == {date(2026, 11, 1)}


def test_a_team_admin_downloads_their_team_s_statement_and_gets_404_for_another(client, alice, cluster, usage):
    usage_rollup(until=DEC_1 + timedelta(hours=2))
    statements_close_month(now=DEC_1 + timedelta(hours=2))
    mine = Statement.objects.get(team__name="vision", format="xlsx")
    theirs = Statement.objects.get(team__name="nlp", format="pdf")
    client.force_login(alice)  # a plain member: statements name people, so they are for team-admins
    assert client.get(f"/accounting/statements/{mine.pk}/").status_code == 404
    lead = UserFactory(username="lead")
    Membership.objects.create(user=lead, team=cluster["vision"], role=Membership.TEAM_ADMIN)
    client.force_login(lead)
    response = client.get(f"/accounting/statements/{mine.pk}/")
    assert response.status_code == 200
    wb = load_workbook(BytesIO(response.content))
    assert {r[2] for r in wb["Job detail"].iter_rows(min_row=2, values_only=True)} == {"vision"}
    assert client.get(f"/accounting/statements/{theirs.pk}/").status_code == 404
    assert client.get("/accounting/statements/999999/").status_code == 404
    html = client.get("/accounting/").content.decode()
    assert f"/accounting/statements/{mine.pk}/" in html and f"/accounting/statements/{theirs.pk}/" not in html
