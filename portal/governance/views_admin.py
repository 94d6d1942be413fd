"""Govern -> Teams, new pools and GPU models: platform administration in the portal. Thin: a form, one
service call, the page again with the service's errors on their fields."""

from django import forms
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db.models import Count
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from accounting.rating import RateBook
from accounting.selectors import rate_cards
from portal.governance import services_admin, services_import
from portal.governance.forms import ReasonMixin
from portal.governance.views import _errors_onto, _save, staff_only
from portal.models import SsoGroupRule, Team
from scheduler.models import GpuModel
from scheduler.services.common import db_now


class TeamForm(ReasonMixin):
    name = forms.CharField(max_length=63, help_text="lowercase letters, digits and hyphens")
    display_name = forms.CharField(max_length=120, required=False)
    parent = forms.ModelChoiceField(queryset=Team.objects.order_by("name"), required=False,
                                    help_text="the department it belongs to (its guarantees cap the team's)")


class PoolForm(ReasonMixin):
    name = forms.CharField(max_length=63)
    description = forms.CharField(max_length=200, required=False)
    teams = forms.ModelMultipleChoiceField(queryset=Team.objects.order_by("name"), required=False,
                                           widget=forms.CheckboxSelectMultiple)


class GpuModelForm(ReasonMixin):
    name = forms.CharField(max_length=63, help_text="e.g. l40s-48gb, or a MIG profile such as a100-1g.10gb")
    display_name = forms.CharField(max_length=120, required=False)
    vendor = forms.CharField(max_length=40, initial="nvidia")
    memory_mb = forms.IntegerField(min_value=1, max_value=10_000_000, label="Memory (MiB)")
    is_mig_profile = forms.BooleanField(required=False, label="A MIG profile (a slice of a GPU)")
    price_per_gpu_hour = forms.DecimalField(
        min_value=0, max_value=10**7, max_digits=12, decimal_places=4, required=False, label="Price per GPU-hour",
        help_text="in the rate card's currency; a new rate card version prices it from now on (others keep "
                  "their price). Left empty: the model is not charged until a rate card prices it.")


@staff_only
def teams(request):
    """Every team in the department tree with its members and pools; a form for a new team."""
    form = TeamForm(request.POST or None)
    if request.method == "POST":
        done = _save(request, form, lambda d: services_admin.team_save(
            user=request.user, values={f: d[f] for f in services_admin.TEAM_FIELDS}, reason=d["reason"]),
            "Team {name} created.", "govern-teams")
        if done:
            return done
    rows = Team.objects.select_related("parent").annotate(members=Count("memberships", distinct=True)).order_by(
        "name")
    return render(request, "governance/teams.html", {"teams": rows, "form": form, "section": "teams"},
                  status=400 if form.errors else 200)


@staff_only
def team_edit(request, name: str):
    team = get_object_or_404(Team, name=name)
    initial = {"name": team.name, "display_name": team.display_name, "parent": team.parent}
    form = TeamForm(request.POST or None, initial=initial)
    form.fields["parent"].queryset = Team.objects.exclude(pk=team.pk).order_by("name")
    if request.method == "POST":
        done = _save(request, form, lambda d: services_admin.team_save(
            user=request.user, instance=team, values={f: d[f] for f in services_admin.TEAM_FIELDS},
            reason=d["reason"]), "Team {name} saved.", "govern-teams")
        if done:
            return done
    return render(request, "governance/team_form.html",
                  {"form": form, "heading": f"Team {team.name}", "team": team, "section": "teams"},
                  status=400 if form.errors else 200)


@staff_only
def pool_new(request):
    form = PoolForm(request.POST or None)
    if request.method == "POST":
        done = _save(request, form, lambda d: services_admin.pool_create(
            user=request.user, name=d["name"], description=d["description"], teams=list(d["teams"]),
            reason=d["reason"]), "Pool {name} created.", "govern-pools")
        if done:
            return done
    return render(request, "governance/team_form.html", {"form": form, "heading": "New pool", "section": "pools"},
                  status=400 if form.errors else 200)


@staff_only
def gpu_models(request):
    form = GpuModelForm(request.POST or None)
    if request.method == "POST":
        done = _save(request, form, lambda d: services_admin.gpu_model_create(
            user=request.user, values=d, reason=d["reason"], price=d.get("price_per_gpu_hour")),
            "GPU model {name} created.", "govern-gpu-models")
        if done:
            return done
    card = RateBook(rate_cards()).card_at(db_now())  # the prices in force now
    rows = [(m, card.prices.get(m.name) if card else None) for m in GpuModel.objects.order_by("name")]
    return render(request, "governance/gpu_models.html",
                  {"rows": rows, "currency": card.currency if card else "", "form": form, "section": "gpu-models"},
                  status=400 if form.errors else 200)


class SsoRuleForm(ReasonMixin):
    group = forms.CharField(max_length=200, help_text="a value of the identity provider's groups claim")
    team = forms.ModelChoiceField(queryset=Team.objects.order_by("name"), required=False,
                                  help_text="leave empty with the role platform admin")
    role = forms.ChoiceField(choices=SsoGroupRule.ROLES)


@staff_only
def sso_rules(request):
    """Govern -> Single sign-on: which identity-provider groups give which team and role."""
    from portal.sso import sso_enabled

    form = SsoRuleForm(request.POST or None)
    if request.method == "POST":
        done = _save(request, form, lambda d: services_admin.sso_rule_add(
            user=request.user, group=d["group"], team=d["team"], role=d["role"], reason=d["reason"]),
            "Rule for group {group} added.", "govern-sso")
        if done:
            return done
    rules = SsoGroupRule.objects.select_related("team")
    return render(request, "governance/sso.html", {"rules": rules, "form": form, "enabled": sso_enabled(),
                                                   "section": "sso"}, status=400 if form.errors else 200)


@staff_only
@require_POST
def sso_rule_delete(request, pk: int):
    rule = get_object_or_404(SsoGroupRule, pk=pk)
    try:
        services_admin.sso_rule_delete(user=request.user, rule=rule, reason=request.POST.get("reason", ""))
    except ValidationError as exc:
        messages.error(request, "; ".join(exc.messages))
    else:
        messages.success(request, f"Rule for group {rule.group} removed.")
    return redirect("govern-sso")


class MembersImportForm(ReasonMixin):
    file = forms.FileField(required=False, help_text="CSV: username,email,team,role")
    text = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 6}), label="Or paste the CSV")

    def csv_text(self) -> str:
        upload = self.cleaned_data.get("file")
        if upload is not None:
            try:
                return upload.read(services_import.MAX_BYTES + 1).decode("utf-8")
            except UnicodeDecodeError:
                self.add_error("file", "the file must be UTF-8 text")
                return ""
        return self.cleaned_data.get("text") or ""


@staff_only
def members_import(request):
    """Import users and memberships from CSV: a dry run shows each line's change; Import applies them all."""
    form = MembersImportForm(request.POST or None, request.FILES or None)
    plan, problem = None, ""
    if request.method == "POST" and form.is_valid():
        text = form.csv_text()
        if request.POST.get("action") == "apply" and not form.errors:
            try:
                lines = services_import.members_import(user=request.user, text=text, reason=form.cleaned_data["reason"])
            except ValidationError as exc:
                _errors_onto(form, exc)
            else:
                changed = sum(1 for x in lines if x.change != "unchanged")
                messages.success(request, f"Imported: {changed} line(s) changed, {len(lines) - changed} unchanged.")
                return redirect("govern-teams")
        plan, problem = services_import.members_import_plan(text)
    return render(request, "governance/members_import.html",
                  {"form": form, "plan": plan, "problem": problem, "section": "teams"},
                  status=400 if form.errors or problem or any(x.error for x in plan or []) else 200)
