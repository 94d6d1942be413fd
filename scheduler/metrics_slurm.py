"""``/metrics`` lines of the accounting reconciliation with Slurm (``scheduler/services/slurm_accounting.py``)."""

from django.db.models import Count, Q

from scheduler.models import SlurmAccounting


def slurm_lines(labels) -> list[str]:
    """Attempts Slurm's record was compared for, and the mismatches among them, per node (counters: a record
    is never removed while its job lives)."""
    rows = list(SlurmAccounting.objects.values("node__name").annotate(
        n=Count("id"), bad=Count("id", filter=Q(mismatch=True))).order_by("node__name"))
    lines = ["# HELP rota_slurm_accounting_records_total Finished attempts whose Slurm record (elapsed x GPUs) was "
             "compared with Rota's ledger.", "# TYPE rota_slurm_accounting_records_total counter"]
    lines += [f"rota_slurm_accounting_records_total{labels(node=r['node__name'])} {r['n']}" for r in rows]
    lines += ["# HELP rota_slurm_accounting_mismatches_total Of those, the ones where Slurm and Rota differ by more "
              "than the tolerance (Govern -> Slurm accounting).",
              "# TYPE rota_slurm_accounting_mismatches_total counter"]
    lines += [f"rota_slurm_accounting_mismatches_total{labels(node=r['node__name'])} {r['bad']}" for r in rows]
    return lines
