"""Chargeback exports (CSV, XLSX, PDF) built from rated usage lines. No HTTP here: the API streams them.

Every text cell goes through ``portal.csvutil.neutralize``, so a job named ``=HYPERLINK(...)`` stays text.
"""

import io
from collections import defaultdict
from collections.abc import Iterable, Iterator
from decimal import Decimal

from accounting.charts import top_jobs, totals_by
from accounting.rating import RateCardVersion, RatedLine
from portal.csvutil import csv_lines, neutralize

COLUMNS = [
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
    "job_id",
    "currency",
    "utilized_gpu_hours",
    "efficiency",
]
MONEY_FORMAT = "#,##0.00"
HOURS_FORMAT = "#,##0.000"




def chargeback_row(line: RatedLine, period: str) -> list:
    u = line.usage
    return [
        period,
        u.department,
        u.team,
        u.user,
        u.job_name,
        u.kind,
        u.gpu_model,
        u.gpus,
        u.gpu_hours.quantize(Decimal("0.000001")),
        line.rate,
        u.card_version,
        line.cost,
        u.job_id,
        line.currency,
        round(u.utilized_gpu_hours, 6) if u.measured_gpu_seconds else None,
        round(u.efficiency, 4) if u.efficiency is not None else None,
    ]


def csv_rows(lines: Iterable[RatedLine], period: str) -> Iterator[str]:
    """The CSV, one encoded line at a time (for a streamed response)."""
    yield from csv_lines([COLUMNS, *(chargeback_row(line, period) for line in lines)])


def _sheet(wb, title: str, header: list[str], rows: Iterable[list], formats: dict[int, str]):
    from openpyxl.styles import Font

    ws = wb.create_sheet(title)
    ws.append(header)
    for cell in ws[1]:
        cell.font = Font(bold=True)
    for row in rows:
        ws.append([neutralize(float(v) if isinstance(v, Decimal) else v) for v in row])
    for col, fmt in formats.items():
        for (cell,) in ws.iter_rows(min_row=2, min_col=col, max_col=col):
            cell.number_format = fmt
    ws.freeze_panes = "A2"
    for i, name in enumerate(header, start=1):
        ws.column_dimensions[ws.cell(row=1, column=i).column_letter].width = max(12, len(name) + 2)
    return ws


def xlsx_bytes(lines: list[RatedLine], period: str, cards: list[RateCardVersion]) -> bytes:
    """A workbook with sheets: Summary by team, By user, Job detail, Rate card."""
    from openpyxl import Workbook

    wb = Workbook()
    wb.remove(wb.active)
    by_team = totals_by(lines, lambda r: r.usage.team)
    dept = {r.usage.team: r.usage.department for r in lines}
    _sheet(
        wb,
        "Summary by team",
        ["period", "department", "team", "allocated_gpu_hours", "cost"],
        ([period, dept[t], t, h, c] for t, h, c in by_team),
        {4: HOURS_FORMAT, 5: MONEY_FORMAT},
    )
    by_user = totals_by(lines, lambda r: f"{r.usage.team}\x00{r.usage.user}")
    _sheet(
        wb,
        "By user",
        ["period", "team", "user", "allocated_gpu_hours", "cost"],
        ([period, *k.split("\x00"), h, c] for k, h, c in by_user),
        {4: HOURS_FORMAT, 5: MONEY_FORMAT},
    )
    _sheet(
        wb,
        "Job detail",
        COLUMNS,
        (chargeback_row(r, period) for r in lines),
        {8: "0.000", 9: HOURS_FORMAT, 10: "#,##0.0000", 12: MONEY_FORMAT, 15: HOURS_FORMAT, 16: "0.0%"},
    )
    _sheet(
        wb,
        "Rate card",
        ["rate_card_version", "effective_from", "gpu_model", "price_per_gpu_hour", "currency"],
        (
            [c.version, c.effective_from.strftime("%Y-%m-%d %H:%M UTC"), m, p, c.currency]
            for c in cards
            for m, p in sorted(c.prices.items())
        ),
        {4: "#,##0.0000"},
    )
    buf = io.BytesIO()
    wb.save(buf)
    return buf.getvalue()


def _bar_chart(values: list[tuple[str, float]]):
    from reportlab.graphics.charts.barcharts import VerticalBarChart
    from reportlab.graphics.shapes import Drawing
    from reportlab.lib import colors

    drawing = Drawing(440, 170)
    chart = VerticalBarChart()
    chart.x, chart.y, chart.width, chart.height = 40, 30, 380, 120
    chart.data = [[v for _, v in values] or [0]]
    chart.categoryAxis.categoryNames = [n for n, _ in values] or ["none"]
    chart.categoryAxis.labels.fontSize = 7
    chart.valueAxis.valueMin = 0
    chart.bars[0].fillColor = colors.HexColor("#3158d4")
    drawing.add(chart)
    return drawing


def pdf_bytes(lines: list[RatedLine], period_label: str, teams: list[str]) -> bytes:
    """A statement per team (one or more pages each): totals, cost by GPU model as a bar chart, top jobs."""
    from xml.sax.saxutils import escape

    from reportlab.lib import colors
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import PageBreak, Paragraph, SimpleDocTemplate, Spacer, Table, TableStyle

    styles = getSampleStyleSheet()
    per_team: dict[str, list[RatedLine]] = defaultdict(list)
    for line in lines:
        per_team[line.usage.team].append(line)
    story = []
    grid = TableStyle(
        [
            ("GRID", (0, 0), (-1, -1), 0.25, colors.grey),
            ("FONTSIZE", (0, 0), (-1, -1), 8),
            ("BACKGROUND", (0, 0), (-1, 0), colors.HexColor("#e5e7eb")),
            ("ALIGN", (-2, 1), (-1, -1), "RIGHT"),
        ]
    )
    for i, team in enumerate(teams or ["(no teams)"]):
        if i:
            story.append(PageBreak())
        tl = per_team.get(team, [])
        currency = tl[0].currency if tl else "USD"
        total_cost = sum((r.cost for r in tl), Decimal(0))
        total_hours = sum((r.usage.gpu_hours for r in tl), Decimal(0))
        story += [
            Paragraph(f"Chargeback statement: {escape(team)}", styles["Title"]),
            Paragraph(f"Period: {escape(period_label)}", styles["Normal"]),
            Spacer(1, 8),
            Table(
                [
                    ["GPU-hours", "Cost", "Jobs"],
                    [f"{total_hours:,.2f}", f"{total_cost:,.2f} {currency}", str(len({r.usage.job_id for r in tl}))],
                ],
                style=grid,
            ),
            Spacer(1, 12),
            Paragraph("Cost by GPU model", styles["Heading3"]),
            _bar_chart([(m, float(c)) for m, _, c in totals_by(tl, lambda r: r.usage.gpu_model)]),
            Paragraph("Top jobs by cost", styles["Heading3"]),
        ]
        rows = [["Job", "User", "GPU-hours", "Cost"]]
        users = {r.usage.job_id: r.usage.user for r in tl}
        for job_id, name, _team, hours, cost in top_jobs(tl, 15):
            rows.append(
                [
                    Paragraph(escape(f"#{job_id} {name}"), styles["BodyText"]),
                    users[job_id],
                    f"{hours:,.2f}",
                    f"{cost:,.2f}",
                ]
            )
        if len(rows) == 1:
            rows.append(["no usage", "", "", ""])
        story.append(Table(rows, colWidths=[230, 100, 70, 70], style=grid, repeatRows=1))
    buf = io.BytesIO()
    SimpleDocTemplate(buf, pagesize=A4, title=f"Rota chargeback {period_label}").build(story)
    return buf.getvalue()
