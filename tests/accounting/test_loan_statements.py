"""Quota loans on the statements: a loan that ran in the month is on both teams' statements, lent by one and
borrowed by the other, with the guarantee it moved inside the month; one that never ran is on neither."""

import base64
import re
import zlib
from datetime import date, timedelta
from io import BytesIO

import pytest
from openpyxl import load_workbook

from accounting.models import Statement
from accounting.services_billing import statements_store
from scheduler.models import QuotaLoan
from tests.accounting.conftest import NOV

pytestmark = pytest.mark.django_db


def loan(cluster, user, *, state, start, hours, gpus=4, decided_at=None):
    return QuotaLoan.objects.create(lender=cluster["vision"], borrower=cluster["nlp"], gpu_model=cluster["h100"],
                                    gpus=gpus, starts_at=start, ends_at=start + timedelta(hours=hours), state=state,
                                    reason="deadline", requested_by=user, decided_at=decided_at)


def sheet(team: str):
    content = Statement.objects.get(team__name=team, month=date(2026, 11, 1), format="xlsx").content
    wb = load_workbook(BytesIO(bytes(content)))
    if "Quota loans" not in wb.sheetnames:
        return []
    return [list(r) for r in wb["Quota loans"].iter_rows(min_row=2, values_only=True)]


def pdf_text(content) -> bytes:
    """The page content streams of a ReportLab PDF, decoded (ASCII85, then Flate)."""
    out = b""
    for raw in re.findall(rb"stream\r?\n(.*?)endstream", bytes(content), re.S):
        data = raw.strip()
        if data.endswith(b"~>"):
            data = base64.a85decode(data[:-2].replace(b"\n", b""))
        try:
            out += zlib.decompress(data)
        except zlib.error:
            out += data
    return out


def test_a_loan_that_ran_is_on_both_teams_statements_and_one_that_never_ran_on_neither(cluster, alice, usage):
    ran = loan(cluster, alice, state=QuotaLoan.ENDED, start=NOV + timedelta(days=10), hours=2)
    # Straddles the month's end: only its November hour counts on November's statements.
    loan(cluster, alice, state=QuotaLoan.APPROVED, start=NOV + timedelta(days=29, hours=23), hours=3,
                gpus=1)
    never = NOV + timedelta(days=12)  # withdrawn before its window opened
    loan(cluster, alice, state=QuotaLoan.CANCELLED, start=never, hours=5, decided_at=never - timedelta(hours=1))
    statements_store(month_start=date(2026, 11, 1))
    lent, borrowed = sheet("vision"), sheet("nlp")
    assert [(r[1], r[2], r[3], r[4], r[5], r[8]) for r in lent] == [
        ("vision", "lent", "nlp", "h100-80gb", 4, 8), ("vision", "lent", "nlp", "h100-80gb", 1, 1)]
    assert [(r[1], r[2], r[3], r[8]) for r in borrowed] == [("nlp", "borrowed", "vision", 8),
                                                           ("nlp", "borrowed", "vision", 1)]
    pdf = pdf_text(Statement.objects.get(team__name="nlp", month=date(2026, 11, 1), format="pdf").content)
    assert b"Quota loans" in pdf and f"#{ran.pk} borrowed from vision".encode() in pdf
