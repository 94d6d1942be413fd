"""Streamed CSV downloads that are safe to open in a spreadsheet."""

import csv
from collections.abc import Iterable

from django.http import StreamingHttpResponse

FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


def neutralize(value):
    """A cell a spreadsheet would evaluate as a formula (=, +, -, @, tab, CR first) is made text with a
    leading apostrophe; numbers stay numbers."""
    if isinstance(value, str) and value.startswith(FORMULA_PREFIXES):
        return "'" + value
    return "" if value is None else value


class _Echo:
    def write(self, value: str) -> str:
        return value


def csv_response(rows: Iterable[list], filename: str) -> StreamingHttpResponse:
    """Stream ``rows`` (the first is the header) as a CSV attachment, neutralizing every cell."""
    writer = csv.writer(_Echo())
    response = StreamingHttpResponse(
        (writer.writerow([neutralize(v) for v in row]) for row in rows), content_type="text/csv; charset=utf-8"
    )
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
