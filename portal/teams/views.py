"""Team pages: the dashboard of one team (quota, fair share, work, failures, members). Members and
platform admins see it; outsiders get 404. Only team-admins (and platform admins) manage members."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from portal.access import teams_for
from portal.teams import selectors, services
from portal.teams.forms import MemberForm
from scheduler.selectors import DEFAULT_COLUMNS
from scheduler.services.common import db_now

FAILURE_COLUMNS = ("id", "name", "kind", "gpus", "state", "finished")


@login_required
def team_index(request):
    """Your teams; one team goes straight to its dashboard."""
    teams = list(teams_for(request.user).order_by("name"))
    if len(teams) == 1:
        return redirect("team-dashboard", name=teams[0].name)
    return render(request, "teams/index.html", {"teams": teams})


def _dashboard_context(request, team, form=None):
    can_manage = selectors.can_manage_team(request.user, team)
    now = db_now()
    return {
        "team": team,
        "quotas": selectors.quota_standing(team=team),
        "share": selectors.share_standing(team=team, now=now),
        "active": selectors.team_active_jobs(user=request.user, team=team),
        "failures": selectors.team_recent_failures(user=request.user, team=team),
        "members": selectors.team_members(team=team) if can_manage else None,
        "can_manage": can_manage,
        "form": form or MemberForm(),
        "columns": DEFAULT_COLUMNS,
        "failure_columns": FAILURE_COLUMNS,
        "loans": selectors.team_loans(team=team, manages=can_manage, now=now),
        "budgets": selectors.team_budgets(team=team, now=now),
    }


@login_required
def team_dashboard(request, name: str):
    team = selectors.team_for(request.user, name)
    return render(request, "teams/dashboard.html", _dashboard_context(request, team))


def _manager_team(request, name):
    team = selectors.team_for(request.user, name)
    if not selectors.can_manage_team(request.user, team):
        raise Http404("No such page")  # members see the team, not its management
    return team


@login_required
@require_POST
def member_set(request, name: str):
    """Add a member or change a member's role."""
    team = _manager_team(request, name)
    form = MemberForm(request.POST)
    if form.is_valid():
        try:
            services.membership_set(actor=request.user, team=team, **form.cleaned_data)
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                form.add_error(field if field in form.fields else None, errors)
        else:
            messages.success(request, f"{form.cleaned_data['username']} is now {form.cleaned_data['role']} "
                                      f"of {team.name}.")
            return redirect("team-dashboard", name=team.name)
    return render(request, "teams/dashboard.html", _dashboard_context(request, team, form), status=400)


@login_required
@require_POST
def member_remove(request, name: str, username: str):
    team = _manager_team(request, name)
    try:
        services.membership_remove(actor=request.user, team=team, username=username)
    except ValidationError as exc:
        messages.error(request, "; ".join(exc.messages))
    else:
        messages.success(request, f"{username} removed from {team.name}.")
    return redirect("team-dashboard", name=team.name)


@login_required
def template_list(request, name: str):
    """The team's saved job templates: apply (members), delete (team-admins)."""
    from scheduler.forms import JobSubmitForm, template_value_errors

    team = selectors.team_for(request.user, name)
    templates = selectors.job_templates(team=team)
    form = JobSubmitForm(teams=[team])  # one for all: its choices are the team's
    for t in templates:  # what changed since it was saved (a class restricted, a pool taken away) shows here
        t.problems = sorted(template_value_errors(team, t.fields or {}, t.kind, form=form).items())
    return render(request, "teams/templates.html", {
        "team": team, "templates": templates,
        "can_manage": selectors.can_manage_team(request.user, team),
    })


@login_required
@require_POST
def template_delete(request, name: str, template_id: int):
    team = selectors.team_for(request.user, name)
    template = selectors.job_template_for(request.user, template_id)
    if template.team_id != team.pk or not selectors.can_manage_team(request.user, team):
        raise Http404("No such template")
    services.job_template_delete(user=request.user, template=template)
    messages.success(request, f"Template {template.name!r} deleted.")
    return redirect("template-list", name=team.name)
