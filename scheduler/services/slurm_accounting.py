"""Accounting reconciliation with Slurm: the Slurm bridge reports Slurm's record of each finished attempt
(from its job completion log: start, end, elapsed time and, where Slurm records it, the GPU count), and the
portal compares elapsed × GPUs with Rota's ledger for that attempt on that node: the GPU-seconds of its
allocations, which ``usage_rollup`` turns into the usage ledger. A difference beyond
``ROTA_SLURM_ACCOUNTING_TOLERANCE_S`` per GPU is a mismatch: stored, listed on Govern -> Slurm accounting and
counted at ``/metrics`` (``rota_slurm_accounting_mismatches_total``)."""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import transaction

from scheduler.models import Allocation, Node, SlurmAccounting

log = logging.getLogger(__name__)
RECORDED, WAITING, NOT_THIS_NODE = "recorded", "waiting", "not this node's"


def slurm_accounting_report(*, node: Node, records: list[dict]) -> dict:
    """Record each of Slurm's records; answers, per record (``"<job id>:<attempt>"``): ``recorded``,
    ``waiting`` (Rota still holds the attempt's GPUs: the bridge sends it again later) or ``not this node's``
    (no attempt of that job ran on this node in Rota: said the same for a job that does not exist, so a node
    learns nothing of other nodes' jobs)."""
    answer: dict[str, str] = {}
    for record in records:
        key = f"{record['job_id']}:{record['attempt']}"
        answer[key] = _record(node, record)
    return {"results": answer}


@transaction.atomic
def _record(node: Node, record: dict) -> str:
    allocations = list(Allocation.objects.filter(job_id=record["job_id"], attempt=record["attempt"], node=node))
    if not allocations:
        return NOT_THIS_NODE
    if any(a.ended_at is None for a in allocations):
        return WAITING
    rota = sum((a.ended_at - a.started_at).total_seconds() * a.share_milli / 1000 for a in allocations)
    from_slurm = record.get("gpus") is not None
    gpus = record["gpus"] if from_slurm else round(sum(a.share_milli for a in allocations) / 1000)
    slurm = float(record["elapsed_s"]) * gpus
    tolerance = float(settings.ROTA_SLURM_ACCOUNTING_TOLERANCE_S) * max(gpus, 1)
    mismatch = abs(rota - slurm) > tolerance
    row, created = SlurmAccounting.objects.update_or_create(
        job_id=record["job_id"], attempt=record["attempt"],
        defaults={"node": node, "slurm_job_id": record["slurm_job_id"], "slurm_state": record["state"],
                  "started_at": record.get("started_at"), "ended_at": record.get("ended_at"),
                  "elapsed_s": float(record["elapsed_s"]), "gpus": gpus, "gpus_from_slurm": from_slurm,
                  "slurm_gpu_seconds": slurm, "rota_gpu_seconds": rota, "tolerance_s": tolerance,
                  "mismatch": mismatch})
    if mismatch and created:
        log.warning("Slurm accounting mismatch: %s (tolerance %.0f GPU-s)", row, tolerance)
    return RECORDED
