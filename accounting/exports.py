"""Chargeback exports (CSV, XLSX, PDF) built from rated usage lines. No HTTP here: the API streams them.

Every text cell goes through ``portal.csvutil.neutralize``, so a job named ``=HYPERLINK(...)`` stays text.
"""

import io
from collections import defaultdict
from collections.abc import Iterable, Iterator
from decimal import Decimal
from typing import TYPE_CHECKING

from accounting.charts import top_jobs, totals_by
from accounting.credits import CreditLine, credit_by_team, credit_rows
from accounting.export_rows import COLUMNS, chargeback_row, idle_rows
from accounting.fairness import TeamFairness
from accounting.idle import IDLE_TEAM, IdleReport
from accounting.numbers import money, percent, quantity
from accounting.rating import RateCardVersion, RatedLine

if TYPE_CHECKING:
    from accounting.loans import LoanLine  # (a Django read; the exports take its plain rows)
from portal.csvutil import csv_lines, neutralize

MONEY_FORMAT = "#,##0.00"
HOURS_FORMAT = "#,##0.000"


def _qty(value, places: int = 1) -> str:
    """A quantity in a PDF statement, rounded as on the dashboard (``accounting.numbers``), with thousands."""
    return quantity(value, places, grouping=True)


def _money(value) -> str:
    return money(value, grouping=True)


def csv_rows(lines: list[RatedLine], period: str, idle: IdleReport | None = None,
             credits: list[CreditLine] | None = None) -> Iterator[str]:
    """The CSV, one encoded line at a time (for a streamed response); idle rows (if any), then the
    preemption credits (kind ``preemption-credit``, negative), last."""
    departments = {r.usage.team: r.usage.department for r in lines}
    yield from csv_lines(
        [COLUMNS, *(chargeback_row(line, period) for line in lines), *idle_rows(idle, period, departments),
         *credit_rows(credits or [], period)]
    )


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


FAIRNESS_COLUMNS = [
    "period",
    "team",
    "gpu_model",
    "guaranteed_gpus",
    "weight",
    "entitled_gpus",
    "entitled_gpu_hours",
    "received_gpu_hours",
    "received_ratio",
    "hours_waiting",
    "hours_waiting_below_guarantee",
    "shortfall_gpu_hours",
    "lost_to_preemption_gpu_hours",
]


def fairness_rows(fairness: Iterable[TeamFairness], period: str) -> Iterator[list]:
    """Per team a row for every model together (with the waiting figures), then one per GPU model."""
    for f in fairness:
        yield [
            period,
            f.team,
            "(all models)",
            f.guaranteed,
            None,
            None,
            f.entitled_gpu_hours,
            f.received_gpu_hours,
            f.received_ratio,
            f.waiting_hours,
            f.below_hours,
            f.shortfall_gpu_hours,
            f.lost_gpu_hours,
        ]
        for ln in f.lines:
            yield [
                period,
                f.team,
                ln.gpu_model,
                ln.guaranteed,
                ln.weight,
                ln.entitled_gpus,
                ln.entitled_gpu_hours,
                ln.received_gpu_hours,
                ln.received_ratio,
                None,
                None,
                None,
                ln.lost_gpu_hours,
            ]


def xlsx_bytes(
    lines: list[RatedLine],
    period: str,
    cards: list[RateCardVersion],
    idle: IdleReport | None = None,
    fairness: list[TeamFairness] | None = None,
    loans: "list[LoanLine] | None" = None,
    credits: list[CreditLine] | None = None,
) -> bytes:
    """A workbook with sheets: Summary by team (with idle cost as the policy says and preemption credits), By
    user, Job detail (credit lines last), Rate card, Fairness when a statement is given, and Quota loans when
    any ran in the period."""
    from openpyxl import Workbook

    wb = Workbook()
    wb.remove(wb.active)
    by_team = totals_by(lines, lambda r: r.usage.team)
    dept = {r.usage.team: r.usage.department for r in lines}
    shares = idle.shares if idle else {}
    credit = credit_by_team(credits or [])
    dept.update({c.team: c.department for c in credits or [] if c.team not in dept})
    zero = Decimal(0)
    summary = [[period, dept[t], t, h, c, shares.get(t, zero), credit.get(t, zero),
                c + shares.get(t, zero) + credit.get(t, zero)] for t, h, c in by_team]
    summary += [[period, dept.get(t, t), t, zero, zero, shares.get(t, zero), credit.get(t, zero),
                 shares.get(t, zero) + credit.get(t, zero)]
                for t in sorted((set(shares) | set(credit)) - {t for t, _h, _c in by_team})]
    if idle is not None and idle.shows_line:
        summary.append([period, "", IDLE_TEAM, idle.idle_gpu_hours, zero, idle.total, zero, idle.total])
    _sheet(
        wb,
        "Summary by team",
        ["period", "department", "team", "allocated_gpu_hours", "cost", "idle_cost", "preemption_credit",
         "total_cost"],
        summary,
        {4: HOURS_FORMAT, 5: MONEY_FORMAT, 6: MONEY_FORMAT, 7: MONEY_FORMAT, 8: MONEY_FORMAT},
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
        [*(chargeback_row(r, period) for r in lines), *credit_rows(credits or [], period)],
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
    if fairness is not None:
        _sheet(
            wb,
            "Fairness",
            FAIRNESS_COLUMNS,
            fairness_rows(fairness, period),
            {
                4: "0.00",
                5: "0.00",
                6: "0.00",
                7: HOURS_FORMAT,
                8: HOURS_FORMAT,
                9: "0.0%",
                10: "0.0",
                11: "0.0",
                12: "0.00",
                13: HOURS_FORMAT,
            },
        )
    if loans:
        _sheet(
            wb,
            "Quota loans",
            LOAN_COLUMNS,
            ([period, x.team, x.direction, x.other, x.gpu_model, x.gpus, x.starts_at.strftime("%Y-%m-%d %H:%M UTC"),
              x.ends_at.strftime("%Y-%m-%d %H:%M UTC"), x.guarantee_gpu_hours] for x in loans),
            {6: "0.000", 9: HOURS_FORMAT},
        )
    buf = io.BytesIO()
    wb.save(buf)
    return buf.getvalue()


LOAN_COLUMNS = ["period", "team", "direction", "other_team", "gpu_model", "gpus", "from", "until",
                "guarantee_gpu_hours"]


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


def _fairness_story(f: TeamFairness | None, styles, grid) -> list:
    """The fairness section of a team's statement: entitled vs received per GPU model, and waiting time."""
    from reportlab.platypus import Paragraph, Spacer, Table

    story = [Paragraph("Fairness", styles["Heading3"])]
    if f is None or not f.lines:
        return [*story, Paragraph("No quota and no usage in this period.", styles["BodyText"])]
    rows = [["GPU model", "Guaranteed", "Entitled GPUs", "Entitled GPU-h", "Received GPU-h", "Received"]]
    for ln in f.lines:
        ratio = percent(ln.received_ratio)
        rows.append(
            [
                ln.gpu_model,
                _qty(ln.guaranteed, 2),
                _qty(ln.entitled_gpus, 2),
                _qty(ln.entitled_gpu_hours),
                _qty(ln.received_gpu_hours),
                ratio,
            ]
        )
    total_ratio = percent(f.received_ratio)
    rows.append(
        [
            "All models",
            _qty(f.guaranteed, 2),
            "",
            _qty(f.entitled_gpu_hours),
            _qty(f.received_gpu_hours),
            total_ratio,
        ]
    )
    text = (
        f"Jobs of the team were waiting for {_qty(f.waiting_hours)} h of the {_qty(f.hours)} h counted; "
        f"{_qty(f.below_hours)} h of it while the team held less than its guarantee of {_qty(f.guaranteed, 2)} GPUs "
        f"(shortfall {_qty(f.shortfall_gpu_hours)} GPU-hours). Entitled: guarantee plus a weight share of the "
        "capacity nobody is guaranteed, each GPU counted only while it was in the inventory (guaranteed and "
        "entitled GPUs are averages over the hours the model had GPUs)."
    ) + (f" Of the GPU-hours received, {_qty(f.lost_gpu_hours, 2)} were work lost to preemption since the jobs' "
         "last checkpoints, credited back to the team in fair share and on this statement." if f.lost_gpu_hours else "")
    widths = [121, 62, 66, 68, 82, 52]  # 451 pt: the A4 frame inside the default margins
    table = Table(rows, colWidths=widths, style=grid, repeatRows=1, hAlign="LEFT")
    table.setStyle([("FONTNAME", (0, -1), (-1, -1), "Helvetica-Bold")])
    return [*story, table, Spacer(1, 4), Paragraph(text, styles["BodyText"])]


def pdf_bytes(
    lines: list[RatedLine],
    period_label: str,
    teams: list[str],
    idle: IdleReport | None = None,
    fairness: list[TeamFairness] | None = None,
    loans: "list[LoanLine] | None" = None,
    credits: list[CreditLine] | None = None,
) -> bytes:
    """A statement per team (one or more pages each): totals (with its idle share under the ``share``
    policy, and its preemption credit), cost by GPU model as a bar chart, top jobs, the work lost to
    preemption and credited, the fairness section when a statement is given, and the team's quota loans."""
    from xml.sax.saxutils import escape

    from reportlab.lib import colors
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import ParagraphStyle, getSampleStyleSheet
    from reportlab.platypus import PageBreak, Paragraph, SimpleDocTemplate, Spacer, Table, TableStyle

    styles = getSampleStyleSheet()
    cell = ParagraphStyle("cell", parent=styles["BodyText"], fontSize=8, leading=10)
    per_team: dict[str, list[RatedLine]] = defaultdict(list)
    for line in lines:
        per_team[line.usage.team].append(line)
    fair = {f.team: f for f in fairness or []}
    story = []
    grid = TableStyle(
        [
            ("GRID", (0, 0), (-1, -1), 0.25, colors.grey),
            ("FONTSIZE", (0, 0), (-1, -1), 8),
            ("BACKGROUND", (0, 0), (-1, 0), colors.HexColor("#e5e7eb")),
            ("VALIGN", (0, 0), (-1, -1), "MIDDLE"),
        ]
    )
    numbers = TableStyle([("ALIGN", (1, 1), (-1, -1), "RIGHT")], parent=grid)
    for i, team in enumerate(teams or ["(no teams)"]):
        if i:
            story.append(PageBreak())
        tl = per_team.get(team, [])
        currency = tl[0].currency if tl else (idle.currency if idle else "USD")
        total_cost = sum((r.cost for r in tl), Decimal(0))
        total_hours = sum((r.usage.gpu_hours for r in tl), Decimal(0))
        share = idle.shares.get(team) if idle else None
        header = ["GPU-hours", "Cost", "Jobs"]
        values = [_qty(total_hours, 2), f"{_money(total_cost)} {currency}", str(len({r.usage.job_id for r in tl}))]
        mine_credits = [c for c in credits or [] if c.team == team]
        credit = sum((c.credit for c in mine_credits), Decimal(0))
        if share is not None or mine_credits:
            header[2:2] = [*(["Idle share"] if share is not None else []), *(["Credit"] if mine_credits else []),
                           "Total"]
            values[2:2] = [*([f"{_money(share)} {currency}"] if share is not None else []),
                           *([f"{_money(credit)} {currency}"] if mine_credits else []),
                           f"{_money(total_cost + (share or 0) + credit)} {currency}"]
        story += [
            Paragraph(f"Chargeback statement: {escape(team)}", styles["Title"]),
            Paragraph(f"Period: {escape(period_label)}", styles["Normal"]),
            Spacer(1, 8),
            Table([header, values], style=numbers, hAlign="LEFT", colWidths=[451 / len(header)] * len(header)),
            Spacer(1, 12),
            Paragraph(f"Cost by GPU model ({escape(currency)})", styles["Heading3"]),
            _bar_chart([(m, float(c)) for m, _, c in totals_by(tl, lambda r: r.usage.gpu_model)]),
            Paragraph("Top jobs by cost", styles["Heading3"]),
        ]
        rows = [["Job", "User", "GPU-hours", "Cost"]]
        users = {r.usage.job_id: r.usage.user for r in tl}
        for job_id, name, _team, hours, cost in top_jobs(tl, 15):
            rows.append(
                [
                    Paragraph(escape(f"#{job_id} {name}"), cell),
                    Paragraph(escape(users[job_id]), cell),
                    _qty(hours, 2),
                    _money(cost),
                ]
            )
        if len(rows) == 1:
            rows.append(["no usage", "", "", ""])
        story.append(Table(rows, colWidths=[211, 100, 70, 70], style=numbers, repeatRows=1, hAlign="LEFT"))
        if mine_credits:
            rows = [["Work lost to preemption (credited)", "GPU model", "GPU-hours", "Credit"]]
            rows += [[Paragraph(escape(f"#{c.job_id} {c.job_name}, attempt {c.attempt}, "
                                       f"{c.completed_at:%Y-%m-%d %H:%M}"), cell), c.gpu_model,
                      _qty(c.gpu_hours, 2), _money(c.credit)] for c in mine_credits]
            story += [Spacer(1, 8), Table(rows, colWidths=[211, 100, 70, 70], style=numbers, repeatRows=1,
                                          hAlign="LEFT")]
        if fairness is not None:
            story += [Spacer(1, 8), *_fairness_story(fair.get(team), styles, numbers)]
        mine = [x for x in loans or [] if x.team == team]
        if mine:
            rows = [["Quota loan", "GPUs", "From", "Until", "Guarantee GPU-hours"]]
            rows += [[Paragraph(escape(f"#{x.loan_id} {x.direction} {'to' if x.direction == 'lent' else 'from'} "
                                       f"{x.other}: {x.gpu_model}"), cell), _qty(x.gpus, 3),
                      x.starts_at.strftime("%Y-%m-%d %H:%M"), x.ends_at.strftime("%Y-%m-%d %H:%M"),
                      _qty(x.guarantee_gpu_hours, 2)] for x in mine]
            story += [Spacer(1, 8), Paragraph("Quota loans", styles["Heading3"]),
                      Table(rows, colWidths=[171, 50, 80, 80, 70], style=numbers, repeatRows=1, hAlign="LEFT")]
    buf = io.BytesIO()
    SimpleDocTemplate(buf, pagesize=A4, title=f"Rota chargeback {period_label}").build(story)
    return buf.getvalue()
