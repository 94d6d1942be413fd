"""Governance reads: the quota matrix with what each team holds now, pools with their teams, nodes, budgets."""

from dataclasses import dataclass, field
from decimal import Decimal

from django.db.models import Count, F, IntegerField, OuterRef, Prefetch, QuerySet, Subquery, Sum
from django.db.models.functions import Coalesce

from accounting.budgets import budget_used, team_month_usage
from accounting.models import Budget
from accounting.rating import BudgetStatus, budget_status
from portal.models import Team
from scheduler.models import Allocation, Gpu, GpuModel, Job, Node, Pool, Quota
from scheduler.models.jobs import HOLDING_STATES, WAITING_STATES
from scheduler.selectors import nodes_matching


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


def teams_as_tree(teams: list[Team]) -> list[Team]:
    """``teams`` in tree order: each parent first, then its children, siblings by name (depth first). A team
    whose parent is not among ``teams`` counts as a root."""
    present = {t.pk for t in teams}
    by_parent: dict[int | None, list[Team]] = {}
    for team in sorted(teams, key=lambda t: t.name):
        by_parent.setdefault(team.parent_id if team.parent_id in present else None, []).append(team)
    ordered: list[Team] = []
    stack = list(reversed(by_parent.get(None, [])))
    while stack:
        team = stack.pop()
        ordered.append(team)
        stack.extend(reversed(by_parent.get(team.pk, [])))
    seen = {t.pk for t in ordered}
    return ordered + [t for t in sorted(teams, key=lambda t: t.name) if t.pk not in seen]  # a loop: listed last


def quota_matrix() -> tuple[list[Team], list[GpuModel], list[list[QuotaCell]]]:
    """Teams (rows, in tree order) × GPU models (columns) of the pool-wide quotas, in three queries."""
    teams = teams_as_tree(list(Team.objects.select_related("parent").order_by("name")))
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


def nodes_for_governance(*, pool: str = "", state: str = "", q: str = "") -> QuerySet[Node]:
    """Nodes by name (of ``pool``, in ``state``, with ``q`` in the name when given), each with its present
    GPUs and the count of its GPUs that jobs hold now (``busy``)."""
    nodes = nodes_matching(pool=pool, state=state, q=q).select_related("state_changed_by")
    # ``busy`` is a subquery over open allocations, not a join over every allocation ever made: counting the
    # nodes (the pager) and listing their ids (the heatmap) then leave it out.
    open_here = (Allocation.objects.filter(node=OuterRef("pk"), ended_at__isnull=True).order_by()
                 .values("node").annotate(n=Count("pk")).values("n"))
    return (nodes.prefetch_related(Prefetch("gpus", queryset=Gpu.objects.filter(present=True).select_related("model")))
            .annotate(busy=Coalesce(Subquery(open_here, output_field=IntegerField()), 0))
            .order_by("name"))


QUEUE_ROWS = 100  # like Kueue's visibility API, the head of each queue; the jobs table lists the rest


@dataclass
class PoolQueue:
    """The waiting jobs one pool could serve, in engine order. ``pool`` None: jobs no pool can serve."""

    pool: Pool | None
    gpu_models: list[str]
    teams: list[str]
    jobs: list = field(default_factory=list)
    total: int = 0  # waiting jobs this pool could serve; ``jobs`` holds the first QUEUE_ROWS of them

    @property
    def more(self) -> int:
        return self.total - len(self.jobs)

    @property
    def name(self) -> str:
        return self.pool.name if self.pool else "no matching pool"


def queue_by_pool(*, pool: str = "") -> list[PoolQueue]:
    """Pending and held jobs per pool, in the engine's order (its last queue positions, then arrival). A job
    is listed under every pool it could run in (its requested pool, its team allowed there, its GPU model
    present there); jobs that fit no pool are listed last. At most QUEUE_ROWS per pool. Five queries; the whole
    backlog is read as plain values and only the jobs shown are built as objects (a 10,000-job backlog took
    3 s as objects)."""
    pools = list(Pool.objects.prefetch_related("teams").order_by("name"))
    models_in: dict[int, set[str]] = {}
    for pool_id, model in Gpu.objects.filter(present=True).values_list("node__pool_id", "model__name").distinct():
        models_in.setdefault(pool_id, set()).add(model)
    queues = {p.pk: PoolQueue(pool=p, gpu_models=sorted(models_in.get(p.pk, ())),
                              teams=sorted(t.name for t in p.teams.all())) for p in pools}
    team_ids = {p.pk: {t.pk for t in p.teams.all()} for p in pools}
    nowhere = PoolQueue(pool=None, gpu_models=[], teams=[])
    waiting = (Job.objects.filter(state__in=WAITING_STATES)
               .order_by(F("queue_position").asc(nulls_last=True), "id")
               .values_list("id", "pool_id", "team_id", "gpu_model__name"))
    shown: set[int] = set()
    for job_id, pool_id, team_id, model in waiting.iterator(chunk_size=5000):
        fits = [q for p_id, q in queues.items()
                if (pool_id is None or pool_id == p_id) and team_id in team_ids[p_id]
                and (model is None or model in q.gpu_models)]
        for q in fits or [nowhere]:
            q.total += 1
            if len(q.jobs) < QUEUE_ROWS:
                q.jobs.append(job_id)
                shown.add(job_id)
    objects = Job.objects.select_related("team", "submitted_by", "gpu_model", "priority_class", "pool").in_bulk(
        list(shown))
    for q in [*queues.values(), nowhere]:
        q.jobs = [objects[job_id] for job_id in q.jobs if job_id in objects]  # one may have ended meanwhile
    out = list(queues.values()) + ([nowhere] if nowhere.total else [])
    if pool:
        out = [q for q in out if q.name == pool]
    return out


def gpu_heatmap(nodes: QuerySet[Node] | None = None) -> dict:
    """GPU utilization (percent, latest sample) as a Plotly heatmap figure: nodes (all, or ``nodes``) across,
    GPU index down; blank where a node has no such GPU or no sample. One query; plain data (no Plotly
    import)."""
    gpus = Gpu.objects.filter(present=True)
    if nodes is not None:
        gpus = gpus.filter(node__in=nodes.values("pk"))
    rows = list(gpus.order_by("node__name", "index").values_list(
        "node__name", "index", "model__name", "util_pct", "healthy"))
    nodes = sorted({r[0] for r in rows})
    depth = max((r[1] for r in rows), default=-1) + 1
    col = {n: i for i, n in enumerate(nodes)}
    z = [[None] * len(nodes) for _ in range(depth)]
    text = [[""] * len(nodes) for _ in range(depth)]
    for node, index, model, util, healthy in rows:
        z[index][col[node]] = None if util is None else round(util, 1)
        state = "" if healthy else " · UNHEALTHY"
        text[index][col[node]] = f"{node}/gpu{index} {model}{state}"
    figure = {
        "data": [{
            "type": "heatmap", "x": nodes, "y": [f"gpu{i}" for i in range(depth)], "z": z, "text": text,
            "zmin": 0, "zmax": 100, "colorscale": "YlGnBu", "reversescale": True, "xgap": 2, "ygap": 2,
            "colorbar": {"title": {"text": "util %"}},
            "hovertemplate": "%{text}<br>utilization %{z}%<extra></extra>",
        }],
        "layout": {
            "title": {"text": "GPU utilization (latest sample)"}, "height": 120 + 28 * max(depth, 1),
            "margin": {"l": 60, "r": 20, "t": 40, "b": 90}, "xaxis": {"tickangle": -40},
            "yaxis": {"autorange": "reversed"},
        },
    }
    return {"figure": figure, "gpus": len(rows), "nodes": len(nodes)}


def capacity_notes(changes) -> list[str]:
    """For each GPU model the changes touch: when the top-level teams' guarantees (children's are inside
    their parents') add up to more than the model's healthy GPUs, not every guarantee can be met at once."""
    models = {ch.gpu_model for ch in changes}
    if not models:
        return []
    top = set(Team.objects.filter(parent__isnull=True).values_list("name", flat=True))
    guaranteed = {(t, m): g for t, m, g in Quota.objects.filter(pool__isnull=True, gpu_model__name__in=models)
                  .values_list("team__name", "gpu_model__name", "guaranteed")}
    guaranteed |= {(ch.team, ch.gpu_model): ch.guaranteed for ch in changes}
    capacity = dict(Gpu.objects.filter(present=True, healthy=True, model__name__in=models)
                    .values_list("model__name").annotate(n=Count("id")))
    notes = []
    for model in sorted(models):
        total = sum(g for (team, m), g in guaranteed.items() if m == model and team in top)
        if total > capacity.get(model, 0):
            notes.append(f"{model}: the top-level teams' guarantees add up to {total.normalize():f} GPUs, but "
                         f"the cluster has {capacity.get(model, 0)} healthy ones, so not every guarantee can "
                         "be met at once")
    return notes


def budgets_this_month() -> list[tuple[Budget, BudgetStatus]]:
    """Every budget with how far its team is through it this month (from the usage ledger), by team."""
    from scheduler.services.common import db_now

    budgets = list(Budget.objects.select_related("team").order_by("team__name", "unit"))
    usage = team_month_usage([b.team for b in budgets], db_now()) if budgets else {}
    return [(b, budget_status(b.team.name, b.unit, b.amount, budget_used(b, usage), b.warn_percent))
            for b in budgets]


def budget_alerts(*, limit: int = 100) -> list:
    """The newest budget alerts of every team (the admin-visible alert list)."""
    from accounting.models import BudgetAlert

    return list(BudgetAlert.objects.select_related("budget", "budget__team")[:limit])
