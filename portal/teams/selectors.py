"""Reads for the team dashboard: quota standing per GPU model (in use, borrowed, lent), fair-share standing
(like Slurm's ``sshare``), running and pending work, recent failures and members. Tenancy first: every
entry point takes a team already fetched through ``team_for`` (the access layer's ``teams_for``)."""

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db.models import Case, Count, F, Prefetch, Q, Sum, Value, When
from django.http import Http404

from portal.access import User, is_platform_admin, jobs_for, role_in, teams_for
from portal.models import Membership, Team
from scheduler.core.plugins.fairshare import entitlements, fair_share_factors
from scheduler.core.types import Policy, QuotaInfo, Snapshot
from scheduler.models import Allocation, JobTemplate, Quota, QuotaLoan
from scheduler.models.jobs import ACTIVE_STATES, HOLDING_STATES, WAITING_STATES, JobState
from scheduler.selectors_policies import policy_active
from scheduler.snapshot import decayed_usage

FAILED_STATES = (JobState.FAILED, JobState.TIMED_OUT, JobState.NODE_LOST)
RECENT_FAILURES = 10
ACTIVE_ROWS = 50  # the dashboard summarizes; the jobs table lists everything


def team_for(user: User, name: str) -> Team:
    """The team ``name`` if ``user`` may see it (member or platform admin), else Http404 like a missing one."""
    team = teams_for(user).filter(name=name).select_related("parent").first()
    if team is None:
        raise Http404("No such team")
    return team


def can_manage_team(user: User, team: Team) -> bool:
    """Team-admins of ``team`` and platform admins manage its members and templates; members do not."""
    return is_platform_admin(user) or role_in(user, team) == Membership.TEAM_ADMIN


@dataclass(frozen=True)
class QuotaStanding:
    """One GPU model of a team's quota, in GPUs. ``borrowed``: held above the guarantee (reclaimable by
    its owners); ``lent``: the part of the team's idle guarantee other teams hold now."""

    gpu_model: str
    guaranteed: Decimal
    limit: Decimal | None
    weight: Decimal
    in_use: Decimal
    borrowed: Decimal
    lent: Decimal

    @property
    def idle_guarantee(self) -> Decimal:
        return max(Decimal(0), self.guaranteed - self.in_use)

    @property
    def headroom(self) -> Decimal | None:
        """GPUs the team may still take before its limit (None: no cap)."""
        return None if self.limit is None else max(Decimal(0), self.limit - self.in_use)


def _usage_by_team_and_model() -> dict[tuple[int, str], Decimal]:
    rows = (Allocation.objects.filter(ended_at__isnull=True, job__state__in=HOLDING_STATES)
            .values("job__team_id", "gpu__model__name").annotate(milli=Sum("share_milli")))
    return {(r["job__team_id"], r["gpu__model__name"]): Decimal(r["milli"]) / 1000 for r in rows}


def quota_standing(*, team: Team) -> list[QuotaStanding]:
    """The team's quota per GPU model with what it holds, borrows and lends now (two queries).

    Lending: on each GPU model, what all teams hold above their guarantees is served from the idle
    guarantees of the others; it is split over the lenders in proportion to their idle guarantee (a lender
    never lends more than its idle guarantee)."""
    quotas = list(Quota.objects.select_related("gpu_model").order_by("gpu_model__name"))
    usage = _usage_by_team_and_model()
    guaranteed: dict[tuple[int, str], Decimal] = {}
    own: dict[str, dict] = {}
    for q in quotas:
        key = (q.team_id, q.gpu_model.name)
        guaranteed[key] = guaranteed.get(key, Decimal(0)) + q.guaranteed
        if q.team_id == team.pk:
            row = own.setdefault(q.gpu_model.name, {"guaranteed": Decimal(0), "limit": Decimal(0),
                                                    "weight": Decimal(0), "capped": True})
            row["guaranteed"] += q.guaranteed
            row["weight"] += q.weight
            if q.limit is None:
                row["capped"] = False
            else:
                row["limit"] += q.limit
    for (team_id, model) in usage:
        if team_id == team.pk and model not in own:  # holds a model without a quota row (e.g. borrowed)
            own[model] = {"guaranteed": Decimal(0), "limit": Decimal(0), "weight": Decimal(0), "capped": True}
    out = []
    for model, row in sorted(own.items()):
        teams = {t for (t, m) in set(guaranteed) | set(usage) if m == model}
        borrowed_by = {t: max(Decimal(0), usage.get((t, model), Decimal(0)) - guaranteed.get((t, model), Decimal(0)))
                       for t in teams}
        idle = {t: max(Decimal(0), guaranteed.get((t, model), Decimal(0)) - usage.get((t, model), Decimal(0)))
                for t in teams}
        in_use = usage.get((team.pk, model), Decimal(0))
        mine_idle = idle.get(team.pk, Decimal(0))
        others_borrow = sum(b for t, b in borrowed_by.items() if t != team.pk)
        idle_total = sum(idle.values())
        lent = Decimal(0)
        if mine_idle and others_borrow:
            lent = min(mine_idle, (others_borrow * mine_idle / idle_total).quantize(Decimal("0.001")))
        out.append(QuotaStanding(
            gpu_model=model, guaranteed=row["guaranteed"], limit=row["limit"] if row["capped"] else None,
            weight=row["weight"], in_use=in_use, borrowed=borrowed_by.get(team.pk, Decimal(0)), lent=lent,
        ))
    return out


@dataclass(frozen=True)
class ShareRow:
    """One team's fair-share standing, like a line of ``sshare``. Usage in decayed GPU-seconds."""

    team: str
    entitlement: float  # GPUs (sum of guarantees, else of quota weights)
    norm_shares: float  # entitlement / all teams' entitlements
    raw_usage: float  # decayed GPU-seconds
    norm_usage: float  # raw_usage / all teams' raw usage
    usage_per_entitlement: float  # the engine's ordering key: lower runs first inside a priority
    fair_share: float  # Slurm's classic factor 2 ** (-norm_usage / norm_shares): 1 idle, 0.5 on target
    rank: int  # 1 runs first among teams (by the engine's key); tied teams share a rank

    @property
    def raw_usage_hours(self) -> float:
        return self.raw_usage / 3600


@dataclass(frozen=True)
class ShareStanding:
    team: ShareRow
    teams: int  # how many teams are ranked
    half_life_s: float
    total_usage: float
    total_entitlement: float


def share_standing(*, team: Team, now: datetime, policy: Policy | None = None) -> ShareStanding:
    """``team``'s fair-share standing against every team, computed with the engine's own entitlement and
    ordering functions over ``decayed_usage`` (two queries and the usage scan)."""
    policy = policy or policy_active().policy
    usage = decayed_usage(now, policy.fair_share_half_life_s)
    quotas = tuple(
        QuotaInfo(team=t, gpu_model=m, guaranteed=float(g), limit=None, weight=float(w))
        for t, m, g, w in Quota.objects.values_list("team__name", "gpu_model__name", "guaranteed", "weight")
    )
    # Ranked among the teams that run work: a department (a team with children) only caps its children.
    names = list(Team.objects.filter(children__isnull=True).values_list("name", flat=True))
    if team.name not in names:
        names.append(team.name)
    snapshot = Snapshot(now=now.timestamp(), nodes=(), jobs=(), quotas=quotas, usage=usage, policy=policy)
    ent = entitlements(snapshot)
    factors = fair_share_factors(snapshot)
    total_ent = sum(ent.values())
    total_usage = sum(max(u, 0.0) for u in usage.values())
    name = team.name
    e = ent.get(name, 0.0)
    u = max(usage.get(name, 0.0), 0.0)
    norm_shares = e / total_ent if total_ent else 0.0
    norm_usage = u / total_usage if total_usage else 0.0
    if norm_shares:
        fair_share = 2 ** (-norm_usage / norm_shares)
    else:
        fair_share = 0.0 if norm_usage else 1.0
    row = ShareRow(team=name, entitlement=e, norm_shares=norm_shares, raw_usage=u, norm_usage=norm_usage,
                   usage_per_entitlement=factors.get(name, 0.0), fair_share=fair_share,
                   rank=1 + sum(1 for n in names if factors.get(n, 0.0) < factors.get(name, 0.0)))
    return ShareStanding(team=row, teams=len(names), half_life_s=policy.fair_share_half_life_s,
                         total_usage=total_usage, total_entitlement=total_ent)


@dataclass(frozen=True)
class ActiveWork:
    """The team's active jobs (holding first, then the queue in engine order), at most ACTIVE_ROWS of them,
    and how many it has in each group."""

    jobs: list
    holding: int
    waiting: int

    @property
    def more(self) -> int:
        return self.holding + self.waiting - len(self.jobs)


def team_active_jobs(*, user: User, team: Team) -> ActiveWork:
    """Running and waiting work of ``team`` (three queries)."""
    base = jobs_for(user).filter(team=team)
    counts = base.aggregate(holding=Count("id", filter=Q(state__in=HOLDING_STATES)),
                            waiting=Count("id", filter=Q(state__in=WAITING_STATES)))
    qs = base.filter(state__in=ACTIVE_STATES).prefetch_related(
        Prefetch("allocations", queryset=Allocation.objects.filter(ended_at__isnull=True).select_related("node", "gpu"),
                 to_attr="open_allocations"))
    holding_first = Case(When(state__in=HOLDING_STATES, then=Value(0)), default=Value(1))
    jobs = list(qs.order_by(holding_first, F("queue_position").asc(nulls_last=True), "id")[:ACTIVE_ROWS])
    return ActiveWork(jobs=jobs, holding=counts["holding"], waiting=counts["waiting"])


def team_recent_failures(*, user: User, team: Team) -> list:
    return list(jobs_for(user).filter(team=team, state__in=FAILED_STATES)
                .order_by("-finished_at", "-id")[:RECENT_FAILURES])


def team_members(*, team: Team) -> list[Membership]:
    return list(Membership.objects.filter(team=team).select_related("user").order_by("user__username"))


def job_templates(*, team: Team) -> list:
    """The team's saved job templates, by name."""
    return list(JobTemplate.objects.filter(team=team).select_related("created_by").order_by("name"))


def job_template_for(user: User, template_id: int | str):
    """The template ``template_id`` if it belongs to a team ``user`` may see, else Http404 (as for a missing
    one)."""
    try:
        pk = int(template_id)
    except (TypeError, ValueError):
        raise Http404("No such template") from None
    template = JobTemplate.objects.filter(pk=pk, team__in=teams_for(user)).select_related("team").first()
    if template is None:
        raise Http404("No such template")
    return template


@dataclass(frozen=True)
class LoanRow:
    """One quota loan as a team's page shows it: ``direction`` is ``lent`` or ``borrowed`` for this team;
    ``can_decide`` (approve/decline) and ``can_cancel`` say what the reader may do with it."""

    loan: object
    direction: str
    other: str
    status: str
    can_decide: bool
    can_cancel: bool


def team_loans(*, team: Team, manages: bool, now: datetime) -> list[LoanRow]:
    """The quota loans ``team`` gives or takes (newest window first, at most 50); ``manages``: whether the reader
    manages the team (``can_manage_team``, asked once by the page), so may decide and cancel its loans."""
    rows = []
    for loan in QuotaLoan.objects.filter(Q(lender=team) | Q(borrower=team)).select_related(
            "lender", "borrower", "gpu_model", "requested_by", "decided_by")[:50]:
        lent = loan.lender_id == team.pk
        status = loan.status_at(now)
        rows.append(LoanRow(
            loan=loan, direction="lent" if lent else "borrowed", other=(loan.borrower if lent else loan.lender).name,
            status=status, can_decide=manages and lent and status == QuotaLoan.REQUESTED,
            can_cancel=manages and not lent and status in (QuotaLoan.REQUESTED, "scheduled", "active")))
    return rows


@dataclass(frozen=True)
class BudgetStanding:
    """A team's budget this month: its use (at the last usage rollup), the percent used, and each threshold
    with whether it fired this month."""

    budget: object
    percent: int
    thresholds: list[tuple[int, bool]]


def team_budgets(*, team: Team, now: datetime) -> list[BudgetStanding]:
    """The team's budgets with their thresholds this month (two queries)."""
    from accounting.budgets import budget_thresholds
    from accounting.models import Budget, BudgetAlert

    budgets = list(Budget.objects.filter(team=team).order_by("unit"))
    fired = set(BudgetAlert.objects.filter(budget__in=budgets, period_start=now.date().replace(day=1)).values_list(
        "budget_id", "threshold"))
    return [BudgetStanding(budget=b, percent=int(b.used * 100 / b.amount) if b.amount else 100,
                           thresholds=[(t, (b.pk, t) in fired) for t in budget_thresholds(b)]) for b in budgets]
