"""Reading scheduling policies: the active one (what the live cycle, quotes and explanations schedule with), the
version that was active at given moments (which version made a decision), and the list Govern shows."""

from bisect import bisect_right
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Prefetch

from scheduler.core.types import Policy
from scheduler.models import PolicyActivation, PolicyVersion, SchedulerBeat, SchedulingPolicy

BUILT_IN = "built-in default"


@dataclass(frozen=True)
class ActivePolicy:
    """The engine's policy and the stored version it comes from (None: no version was ever activated, e.g. a
    database emptied by hand; the engine's built-in ``Policy()`` is used)."""

    policy: Policy
    version: PolicyVersion | None

    @property
    def label(self) -> str:
        return self.version.label if self.version is not None else BUILT_IN


def policy_active() -> ActivePolicy:
    """The version activated last, as the engine's ``Policy`` (one query)."""
    activation = PolicyActivation.objects.select_related("version__policy").order_by("-at", "-id").first()
    if activation is None:
        return ActivePolicy(policy=Policy(), version=None)
    return ActivePolicy(policy=activation.version.to_policy(), version=activation.version)


def policy_versions_at(times: list[datetime | None]) -> list[PolicyVersion | None]:
    """For each moment, the version the live cycle scheduled with then (None: before any activation, or no
    moment). Exact for the cycle's decisions: an activation holds the cycle's lock (``services.policies``)."""
    if not any(times):
        return [None] * len(times)
    activations = list(PolicyActivation.objects.select_related("version__policy").order_by("at", "id"))
    moments = [a.at for a in activations]
    out: list[PolicyVersion | None] = []
    for t in times:
        i = bisect_right(moments, t) if t is not None else 0
        out.append(activations[i - 1].version if i else None)
    return out


@dataclass(frozen=True)
class PolicyRow:
    policy: SchedulingPolicy
    current: PolicyVersion
    versions: list[PolicyVersion]
    active: bool


def policy_list() -> list[PolicyRow]:
    """Every policy with its versions (newest first) and whether it holds the active version (two queries)."""
    active = policy_active().version
    rows = []
    for policy in SchedulingPolicy.objects.prefetch_related(
            Prefetch("versions", queryset=PolicyVersion.objects.select_related("created_by").order_by("-number"))):
        versions = list(policy.versions.all())
        if versions:
            rows.append(PolicyRow(policy=policy, current=versions[0], versions=versions,
                                  active=active is not None and active.policy_id == policy.pk))
    return rows


def policy_version_choices() -> list[tuple[int, str]]:
    """(version id, label) of every stored version, the active one first and marked: what a what-if compares."""
    active = policy_active().version
    versions = list(PolicyVersion.objects.select_related("policy").order_by("policy__name", "-number"))
    versions.sort(key=lambda v: active is None or v.pk != active.pk)
    return [(v.pk, f"{v.label} (active)" if active is not None and v.pk == active.pk else v.label) for v in versions]


def job_decision_policies(*, transitions: list, preemptions: list, waiting: bool) -> str | None:
    """Name on each of a job's scheduler decisions the policy version that made it (``policy_label`` on its
    admissions, in ``transitions``, and on its ``preemptions``); return, for a waiting job, the version of the
    last cycle, which judged its pending reason (two queries at most)."""
    decided = [t for t in transitions if t.to_state == "admitted" and t.actor_id is None]
    last_cycle = (SchedulerBeat.objects.filter(name=SchedulerBeat.CYCLE).values_list("at", flat=True).first()
                  if waiting else None)
    items = [*decided, *preemptions]
    versions = policy_versions_at([i.at for i in items] + [last_cycle])
    for item, version in zip(items, versions, strict=False):
        item.policy_label = version.label if version is not None else BUILT_IN
    return (versions[-1].label if versions[-1] is not None else BUILT_IN) if last_cycle is not None else None


def last_cycle_policy() -> tuple[datetime, str] | None:
    """When the last scheduling cycle ran and the policy version it scheduled with (None: no cycle yet)."""
    at = SchedulerBeat.objects.filter(name=SchedulerBeat.CYCLE).values_list("at", flat=True).first()
    if at is None:
        return None
    version = policy_versions_at([at])[0]
    return at, version.label if version is not None else BUILT_IN
