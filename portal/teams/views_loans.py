"""The team page's quota loans: a team-admin asks another team for GPUs of its guarantee; the lender's
team-admins approve or decline; the borrower's cancel. The services check who may act (and audit)."""

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from portal.teams import selectors
from scheduler.models import QuotaLoan
from scheduler.services import loans as loan_services


class LoanRequestForm(forms.Form):
    lender = forms.CharField(max_length=63, label="From team")
    gpu_model = forms.CharField(max_length=63, label="GPU model")
    gpus = forms.CharField(max_length=30, label="GPUs")
    starts_at = forms.DateTimeField(label="From (UTC)", widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))
    ends_at = forms.DateTimeField(label="Until (UTC)", widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))
    reason = forms.CharField(max_length=500, label="Why")


@login_required
@require_POST
def loan_request(request, name: str):
    team = selectors.team_for(request.user, name)
    form = LoanRequestForm(request.POST)
    if not form.is_valid():
        messages.error(request, "; ".join(f"{form.fields[k].label}: {' '.join(v)}" for k, v in form.errors.items()))
        return redirect("team-dashboard", name=team.name)
    try:
        loan = loan_services.loan_request(user=request.user, borrower=team, **form.cleaned_data)
    except PermissionDenied as exc:
        raise Http404(str(exc)) from None
    except ValidationError as exc:
        messages.error(request, "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items()))
    else:
        messages.success(request, f"Loan #{loan.pk} asked of {loan.lender.name}: its team-admins decide.")
    return redirect("team-dashboard", name=team.name)


@login_required
@require_POST
def loan_decide(request, name: str, loan_id: int, action: str):
    team = selectors.team_for(request.user, name)
    actions = {"approve": loan_services.loan_approve, "decline": loan_services.loan_decline,
               "cancel": loan_services.loan_cancel}
    try:
        loan = loan_services.loan_for(request.user, loan_id)
    except QuotaLoan.DoesNotExist:
        raise Http404("No such loan") from None
    if action not in actions or team.pk not in (loan.lender_id, loan.borrower_id):
        raise Http404("No such loan")
    try:
        actions[action](user=request.user, loan=loan, note=request.POST.get("note", ""))
    except PermissionDenied as exc:
        messages.error(request, str(exc))
    except ValidationError as exc:
        messages.error(request, "; ".join(exc.messages))
    else:
        done = {"approve": "approved", "decline": "declined", "cancel": "cancelled"}[action]
        messages.success(request, f"Loan #{loan.pk} {done}.")
    return redirect("team-dashboard", name=team.name)
