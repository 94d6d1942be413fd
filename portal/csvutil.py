"""Spreadsheet-safe CSV: one neutralizing rule and one streamed writer for every export (jobs, audit log,
chargeback)."""

import csv
from collections.abc import Iterable, Iterator

from django.http import StreamingHttpResponse

FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


def neutralize(value):
    """A text cell a spreadsheet would evaluate as a formula (=, +, -, @, tab or CR first) gets a leading
    apostrophe so it stays text (OWASP CSV injection); other values pass through unchanged."""
    if isinstance(value, str) and value.startswith(FORMULA_PREFIXES):
        return "'" + value
    return value


class _Echo:
    def write(self, value: str) -> str:
        return value


def csv_lines(rows: Iterable[Iterable]) -> Iterator[str]:
    """Encode ``rows`` (the first is the header) one CSV line at a time, neutralizing every cell."""
    writer = csv.writer(_Echo())
    for row in rows:
        yield writer.writerow([neutralize(v) for v in row])


def csv_response(rows: Iterable[Iterable], filename: str) -> StreamingHttpResponse:
    """Stream ``rows`` as a CSV attachment."""
    response = StreamingHttpResponse(csv_lines(rows), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
