"""Chargeback rows, one list per line in ``COLUMNS`` order, shared by the CSV and the XLSX "Job detail" sheet:
usage lines, idle cost (``accounting.idle``) and preemption credits (``accounting.credits.credit_rows``)."""

from decimal import Decimal

from accounting.idle import IDLE_TEAM, IdleReport
from accounting.rating import RatedLine

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


def idle_rows(idle: IdleReport | None, period: str, departments: dict[str, str]) -> list[list]:
    """Chargeback rows for idle cost, kind ``idle``: under ``separate`` one row per GPU model and rate card
    (team ``(idle)``, GPUs = capacity, allocated_gpu_hours = idle GPU-hours); under ``share`` one row per team
    with its share of the idle cost."""
    if idle is None:
        return []
    rows = []
    if idle.shows_line:
        for model, version, gpus, hours, rate, cost in idle.by_model_version():
            rows.append(
                [
                    period,
                    "",
                    IDLE_TEAM,
                    "",
                    "idle capacity",
                    "idle",
                    model,
                    gpus,
                    hours.quantize(Decimal("0.000001")),
                    rate,
                    version,
                    cost,
                    None,
                    idle.currency,
                    None,
                    None,
                ]
            )
    for team, cost in sorted(idle.shares.items()):
        rows.append(
            [
                period,
                departments.get(team, team),
                team,
                "",
                "idle share",
                "idle",
                "",
                None,
                None,
                None,
                None,
                cost,
                None,
                idle.currency,
                None,
                None,
            ]
        )
    return rows
