"""Govern -> Slurm accounting: Slurm's record of each finished attempt the Slurm bridge ran beside Rota's ledger
(``scheduler/services/slurm_accounting.py``); mismatches first (platform admins only)."""

from django.core.paginator import Paginator
from django.db.models import Count, Q
from django.shortcuts import render

from portal.governance.views import staff_only
from scheduler.models import SlurmAccounting

PAGE = 100


@staff_only
def slurm_accounting(request):
    only_mismatches = request.GET.get("all") != "1"
    rows = SlurmAccounting.objects.select_related("job", "job__team", "node").order_by("-mismatch", "-recorded_at",
                                                                                      "-id")
    if only_mismatches:
        rows = rows.filter(mismatch=True)
    totals = SlurmAccounting.objects.aggregate(n=Count("id"), bad=Count("id", filter=Q(mismatch=True)))
    page = Paginator(rows, PAGE).get_page(request.GET.get("page"))
    return render(request, "governance/slurm_accounting.html", {
        "page": page, "rows": page.object_list, "totals": totals, "only_mismatches": only_mismatches,
        "section": "slurm"})
