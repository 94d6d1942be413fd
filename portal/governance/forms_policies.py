"""Forms of Govern -> Policies: a policy's knobs (every knob of the engine's policy) with the reason for the
change. The rules are the service's (``scheduler.services.policies.policy_validate``): its refusals land on
the fields they name."""

from django import forms

from portal.durations import EXAMPLE, duration_parse, duration_words
from portal.governance.forms import ReasonMixin
from scheduler.models.policies import KNOBS, ORDERINGS, PLACEMENTS, PREEMPTION_SCOPES, PolicyVersion


class DurationField(forms.CharField):
    """A duration typed and shown in words ("7 days", "36 hours"; a bare number is seconds), cleaned to seconds."""

    def prepare_value(self, value):
        return duration_words(value) if isinstance(value, int | float) and not isinstance(value, bool) else value

    def to_python(self, value):
        text = super().to_python(value)
        if text in self.empty_values:
            return None
        try:
            return duration_parse(text)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None


class PolicyKnobsForm(ReasonMixin):
    ordering = forms.ChoiceField(choices=[(o, o) for o in ORDERINGS], help_text=(
        "the order inside a priority level: fairshare (teams below their share first), fifo (arrival), las "
        "(least GPU time received first, Tiresias)"))
    placement = forms.ChoiceField(choices=[(p, p) for p in PLACEMENTS], help_text=(
        "binpack: fill the fullest node that fits (keeps whole nodes free for gangs); spread: the emptiest"))
    backfill = forms.BooleanField(required=False, help_text="start smaller jobs in the gaps when they do not "
                                                           "delay the estimated start of the jobs ahead")
    preemption = forms.BooleanField(required=False, help_text="higher priority work may preempt lower")
    preemption_scope = forms.ChoiceField(choices=[(s, s) for s in PREEMPTION_SCOPES], label="Preemption scope",
                                         help_text="team: priority preemption within the preemptor's team only; "
                                                   "cluster: any team's work")
    borrowing = forms.BooleanField(required=False, help_text="teams may borrow idle guaranteed GPUs up to their "
                                                            "limit")
    reclaim = forms.BooleanField(required=False, help_text="a team below its guarantee takes borrowed GPUs back by "
                                                          "preemption (needs preemption)")
    guarantee_first = forms.BooleanField(required=False, label="Guarantee first", help_text=(
        "within a priority level, admit work inside its team's guarantee before work that would borrow"))
    fair_share_half_life_s = DurationField(label="Fair-share half-life", help_text=(
        f"how fast past usage is forgotten: {EXAMPLE}; from 1 minute to 365 days"))
    las_thresholds_gpu_s = forms.CharField(required=False, label="Service-level thresholds (GPU-seconds)",
                                           help_text="ordering las only: ascending, separated by commas "
                                                     "(3600, 36000); empty: continuous LAS")

    field_order = ["ordering", "placement", "backfill", "preemption", "preemption_scope", "borrowing", "reclaim",
                   "guarantee_first", "fair_share_half_life_s", "las_thresholds_gpu_s", "reason"]

    def values(self) -> dict:
        """The knob values as the service takes them (thresholds as typed: the service parses and names them)."""
        return {k: self.cleaned_data[k] for k in KNOBS}


def knob_initial(version: PolicyVersion) -> dict:
    """A form's initial values: ``version``'s knobs."""
    initial = version.knobs()
    initial["las_thresholds_gpu_s"] = ", ".join(f"{t:g}" for t in version.las_thresholds_gpu_s)
    return initial


class NewPolicyForm(PolicyKnobsForm):
    name = forms.CharField(max_length=40, help_text="lower-case letters, digits and hyphens (e.g. spread-training)")
    description = forms.CharField(max_length=300, required=False)

    field_order = ["name", "description", *PolicyKnobsForm.field_order]


class ActivateForm(ReasonMixin):
    """Activate one version (the reason is required by the service)."""
