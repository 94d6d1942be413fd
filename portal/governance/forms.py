"""Forms of the governance pages: the quota matrix (parsed by hand: one input per cell and field),
priority classes, pool teams, node state changes, budgets and images."""

from datetime import datetime

from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils.dateparse import parse_datetime

from accounting.models import Budget
from portal.governance.images import patterns_parse
from portal.governance.selectors import QuotaCell
from portal.governance.services import QUOTA_FIELDS, QuotaChange, quota_changes_parse
from portal.models import Team
from scheduler.models import PriorityClass


def quota_input_name(team: str, gpu_model: str, field: str) -> str:
    return f"q:{team}:{gpu_model}:{field}"


def parse_quota_matrix(data, rows: list[list[QuotaCell]]) -> tuple[list[QuotaChange], dict[str, str]]:
    """The cells an editor submitted, as QuotaChanges (blank guaranteed: 0, blank limit: no cap, blank weight:
    1), plus every error of the submission at once, keyed ``team/model.field`` (see
    services.quota_changes_parse). Cells left entirely blank where no quota exists are skipped. Each cell
    keeps what was typed (``posted``) for re-display."""
    items = []
    cleared = {}
    for row in rows:
        for cell in row:
            team, model = cell.team.name, cell.gpu_model.name
            raw = {f: data.get(quota_input_name(team, model, f), "") for f in QUOTA_FIELDS}
            stamp = data.get(quota_input_name(team, model, "updated_at"), "")
            cell.posted = {**raw, "updated_at": stamp}
            if not any(v.strip() for v in raw.values()):
                if cell.quota is not None:
                    # Emptying a cell reads as "take this away", but blank values mean guaranteed 0 and no
                    # cap: the team could borrow without limit. Say how to do what was meant.
                    cleared[f"{cell.key}.limit"] = (
                        f"{cell.key}: an emptied cell would mean guaranteed 0 and no cap (unlimited borrowing); to "
                        f"take {team}'s {model} away set its limit to 0, or type the values you want")
                continue
            updated_at: datetime | None = parse_datetime(stamp) if stamp else None
            items.append({"team": team, "gpu_model": model, "updated_at": updated_at, **raw})
    changes, errors = quota_changes_parse(items)
    return changes, cleared | errors


def attach_errors(rows: list[list[QuotaCell]], errors: dict[str, str]) -> None:
    """Put each ``team/model.field`` error on its cell, for inline display."""
    cells = {cell.key: cell for row in rows for cell in row}
    for key, message in errors.items():
        cell_key, _, field = key.rpartition(".")
        if cell_key in cells:
            cells[cell_key].errors[field] = message


class ReasonMixin(forms.Form):
    reason = forms.CharField(max_length=500, required=False,
                             help_text="why, required for a change (kept in the audit log)")


class PriorityClassForm(ReasonMixin, forms.ModelForm):
    class Meta:
        model = PriorityClass
        fields = ["name", "value", "description", "preemptible", "may_preempt", "min_runtime_s", "grace_period_s",
                  "restricted", "teams"]
        labels = {
            "min_runtime_s": "Minimum runtime (seconds)",
            "grace_period_s": "Grace period (seconds)",
            "restricted": "Restricted to the teams below",
            "teams": "Teams granted this class",
        }
        widgets = {"teams": forms.CheckboxSelectMultiple}
        help_texts = {
            "min_runtime_s": "a job of this class runs at least this long before it may be preempted (0: no minimum)",
            "grace_period_s": "from SIGTERM to SIGKILL when a job of this class is preempted or stopped: time to "
                              "checkpoint and exit cleanly",
            "restricted": "only the granted teams may submit with this class (others are told which classes they "
                          "may use); unticked: every team may. Jobs already submitted keep their class",
            "teams": "they may submit with this class while it is restricted; each team needs its own tick (a "
                     "department's tick does not cover its teams)",
        }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["name"].disabled = True

    def validate_unique(self):
        """Uniqueness is checked by the service (with a message naming the clash)."""


class PoolTeamsForm(ReasonMixin):
    teams = forms.ModelMultipleChoiceField(queryset=Team.objects.all(), required=False,
                                           widget=forms.CheckboxSelectMultiple)


class NodeStateForm(forms.Form):
    reason = forms.CharField(max_length=300, help_text="required: why the node is drained or resumed")


class JobPriorityForm(forms.Form):
    priority_class = forms.ModelChoiceField(queryset=PriorityClass.objects.all(), to_field_name="name",
                                            label="Priority class")
    # Required, but checked by the service together with the job's state, so one answer names every problem.
    reason = forms.CharField(max_length=500, required=False, help_text="required: why (kept in the audit log)")


class BudgetForm(ReasonMixin, forms.ModelForm):
    """A team's monthly budget; team and unit are fixed once it exists."""

    class Meta:
        model = Budget
        fields = ["team", "unit", "amount", "warn_percent", "enforce"]
        labels = {"amount": "Amount per month", "warn_percent": "Warn at (% used)",
                  "enforce": "Enforce: hold back the team's waiting work once it is spent"}
        help_texts = {
            "amount": "GPU-hours, or money in the rate card's currency",
            "warn_percent": "the accounting page shows a warning from this share of the budget on (0 to 100)",
            "enforce": "running work is never stopped; waiting work starts again when the budget is raised or "
                       "the month ends",
        }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["team"].queryset = Team.objects.order_by("name")
        if self.instance.pk:
            self.fields["team"].disabled = True
            self.fields["unit"].disabled = True

    def validate_unique(self):
        """One budget per team and unit: checked by the service (with a message naming the team)."""


class PoolImagesForm(ReasonMixin):
    allowed_images = forms.CharField(
        label="Allowed images", required=False, widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false"}),
        help_text="one a line: a registry or prefix ending in / (registry.example.com/), a pattern with * "
                  "(localhost/rota/*), a repository (localhost/rota/python) or one image; empty: no image")

    def clean_allowed_images(self) -> list[str]:
        try:
            return patterns_parse(self.cleaned_data["allowed_images"])
        except ValidationError as exc:
            raise ValidationError(exc.message_dict["allowed_images"]) from None


class KindImageForm(ReasonMixin):
    image = forms.CharField(label="Default image", required=False, max_length=300,
                            help_text="blank: the site's default")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["image"].widget.attrs["placeholder"] = f"{settings.ROTA_DEFAULT_IMAGE} (the site's)"
