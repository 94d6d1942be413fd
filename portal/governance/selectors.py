"""Governance reads: the quota matrix with what each team holds now, pools with their teams, nodes."""

from dataclasses import dataclass, field
from decimal import Decimal

from django.db.models import Count, Prefetch, Q, Sum

from portal.models import Team
from scheduler.models import Allocation, Gpu, GpuModel, Node, Pool, Quota
from scheduler.models.jobs import HOLDING_STATES


@dataclass
class QuotaCell:
    """One team × GPU model cell: the quota row (None when absent) and the GPUs the team holds now."""

    team: Team
    gpu_model: GpuModel
    quota: Quota | None
    in_use: Decimal = Decimal(0)
    errors: dict = field(default_factory=dict)
    posted: dict | None = None  # the values an editor submitted, when re-rendering a form

    @property
    def key(self) -> str:
        return f"{self.team.name}/{self.gpu_model.name}"

    def value(self, name: str):
        if self.posted is not None:
            return self.posted.get(name, "")
        if self.quota is None:
            return ""
        value = getattr(self.quota, name)
        return "" if value is None else format(value.normalize(), "f")

    @property
    def inputs(self) -> list[dict]:
        """The cell's three inputs (name, label, value, error) for the template."""
        return [
            {"field": f, "name": f"q:{self.team.name}:{self.gpu_model.name}:{f}", "label": f"{self.key} {f}",
             "value": self.value(f), "error": self.errors.get(f, "")}
            for f in ("guaranteed", "limit", "weight")
        ]

    @property
    def stamp(self) -> str:
        """The row's ``updated_at`` as the editor read it (the optimistic-concurrency token)."""
        if self.posted is not None:
            return self.posted.get("updated_at", "")
        return self.quota.updated_at.isoformat() if self.quota else ""


def usage_by_team_and_model() -> dict[tuple[int, int], Decimal]:
    """GPUs held now (open allocations of holding jobs) per (team id, GPU model id), fractions included."""
    rows = (
        Allocation.objects.filter(ended_at__isnull=True, job__state__in=HOLDING_STATES)
        .values("job__team_id", "gpu__model_id").annotate(milli=Sum("share_milli"))
    )
    return {(r["job__team_id"], r["gpu__model_id"]): Decimal(r["milli"]) / 1000 for r in rows}


def quota_matrix() -> tuple[list[Team], list[GpuModel], list[list[QuotaCell]]]:
    """Teams (rows) × GPU models (columns) of the pool-wide quotas, in three queries."""
    teams = list(Team.objects.select_related("parent").order_by("name"))
    gpu_models = list(GpuModel.objects.order_by("name"))
    quotas = {(q.team_id, q.gpu_model_id): q for q in Quota.objects.filter(pool__isnull=True)}
    usage = usage_by_team_and_model()
    rows = [
        [QuotaCell(team=t, gpu_model=m, quota=quotas.get((t.pk, m.pk)), in_use=usage.get((t.pk, m.pk), Decimal(0)))
         for m in gpu_models]
        for t in teams
    ]
    return teams, gpu_models, rows


def pools_with_teams() -> list[Pool]:
    return list(Pool.objects.prefetch_related("teams").annotate(node_count=Count("nodes")).order_by("name"))


def nodes_for_governance() -> list[Node]:
    return list(
        Node.objects.select_related("pool", "state_changed_by")
        .prefetch_related(Prefetch("gpus", queryset=Gpu.objects.filter(present=True).select_related("model")))
        .annotate(busy=Count("allocations", filter=Q(allocations__ended_at__isnull=True), distinct=True))
        .order_by("name")
    )
