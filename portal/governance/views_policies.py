"""Govern -> Policies: the scheduling policies admins create, tune (each edit a new immutable version) and
activate for the live cycle (platform admins only; the rules are ``scheduler.services.policies``). Thin: a
form, one service call, the page again with the service's errors on their fields."""

from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from portal.durations import duration_words
from portal.governance.forms_policies import ActivateForm, NewPolicyForm, PolicyKnobsForm, knob_initial
from portal.governance.views import _save, staff_only
from scheduler.models import PolicyVersion, SchedulingPolicy
from scheduler.models.policies import KNOBS
from scheduler.selectors_policies import last_cycle_policy, policy_active, policy_list
from scheduler.services import policies as services


@staff_only
def policies(request):
    """Every policy, its current version and which one the live cycle uses; a form for a new policy."""
    active = policy_active()
    initial = knob_initial(active.version) if active.version is not None else {}
    form = NewPolicyForm(request.POST or None, initial=initial)
    if request.method == "POST":
        done = _save(request, form, lambda d: services.policy_create(
            user=request.user, name=d["name"], description=d["description"], values=form.values(),
            reason=d["reason"]), "Policy {name} created as version 1 (not active yet).", "govern-policies")
        if done:
            return done
    return render(request, "governance/policies.html", {
        "rows": policy_list(), "active": active, "form": form, "knobs": KNOBS, "section": "policies",
        "last_cycle": last_cycle_policy(),
    }, status=400 if form.errors else 200)


def _history(policy: SchedulingPolicy) -> list[dict]:
    """The versions, newest first, each with the knobs it changed from the one before and its activations."""
    versions = list(policy.versions.select_related("created_by").prefetch_related("activations__actor")
                    .order_by("number"))
    rows, before = [], {}
    for version in versions:
        knobs = version.knobs()
        changed = {k: v for k, v in knobs.items() if before.get(k) != v} if before else {}
        if "fair_share_half_life_s" in changed:
            changed["fair_share_half_life_s"] = duration_words(changed["fair_share_half_life_s"])
        rows.append({"version": version, "changed": changed, "activations": list(version.activations.all())})
        before = knobs
    return rows[::-1]


def _page(request, policy: SchedulingPolicy, form=None, activate=None, status=200):
    active = policy_active()
    current = policy.versions.order_by("-number").first()
    form = form or PolicyKnobsForm(initial=knob_initial(current))
    return render(request, "governance/policy.html", {
        "policy": policy, "current": current, "active": active, "form": form, "history": _history(policy),
        "activate_form": activate or ActivateForm(), "section": "policies",
        "is_active": active.version is not None and active.version.policy_id == policy.pk,
    }, status=status)


@staff_only
def policy_edit(request, name: str):
    """One policy: its knobs to edit (saved as the next version) and its history."""
    policy = get_object_or_404(SchedulingPolicy, name=name)
    if request.method != "POST":
        return _page(request, policy)
    form = PolicyKnobsForm(request.POST)
    done = _save(request, form, lambda d: services.policy_version_create(
        user=request.user, policy=policy, values=form.values(), reason=d["reason"]),
        f"Policy {policy.name}: new version saved.", reverse("govern-policy", args=[policy.name]))
    return done if done is not None else _page(request, policy, form=form, status=400)


@staff_only
@require_POST
def policy_activate(request, name: str, number: int):
    """Make one version the live cycle's policy from now on."""
    version = get_object_or_404(PolicyVersion.objects.select_related("policy"), policy__name=name, number=number)
    form = ActivateForm(request.POST)
    done = _save(request, form, lambda d: services.policy_activate(
        user=request.user, version=version, reason=d["reason"]),
        f"{version.label} is active: the next cycle schedules with it.", reverse("govern-policy", args=[name]))
    return done if done is not None else _page(request, version.policy, activate=form, status=400)

