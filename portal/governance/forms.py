"""Forms of the governance pages: the quota matrix (parsed by hand: one input per cell and field),
priority classes, pool teams and node state changes."""

from datetime import datetime
from decimal import Decimal, InvalidOperation

from django import forms
from django.utils.dateparse import parse_datetime

from portal.governance.selectors import QuotaCell
from portal.governance.services import QuotaChange
from portal.models import Team
from scheduler.models import PriorityClass

QUOTA_FIELDS = ("guaranteed", "limit", "weight")


def quota_input_name(team: str, gpu_model: str, field: str) -> str:
    return f"q:{team}:{gpu_model}:{field}"


def _decimal(raw: str, *, default: Decimal | None) -> Decimal | None:
    raw = (raw or "").strip()
    if not raw:
        return default
    value = Decimal(raw)
    if not value.is_finite():
        raise InvalidOperation
    return value.quantize(Decimal("0.001"))


def parse_quota_matrix(data, rows: list[list[QuotaCell]]) -> tuple[list[QuotaChange], dict[str, str]]:
    """The cells an editor submitted, as QuotaChanges (blank guaranteed: 0, blank limit: no cap, blank weight:
    1), plus errors keyed ``team/model.field`` for values that are not numbers. Cells left entirely blank
    where no quota exists are skipped."""
    changes, errors = [], {}
    for row in rows:
        for cell in row:
            team, model = cell.team.name, cell.gpu_model.name
            raw = {f: data.get(quota_input_name(team, model, f), "") for f in QUOTA_FIELDS}
            stamp = data.get(quota_input_name(team, model, "updated_at"), "")
            cell.posted = {**raw, "updated_at": stamp}
            if cell.quota is None and not any(v.strip() for v in raw.values()):
                continue
            values = {}
            for f, default in (("guaranteed", Decimal(0)), ("limit", None), ("weight", Decimal(1))):
                try:
                    values[f] = _decimal(raw[f], default=default)
                except (InvalidOperation, ValueError):
                    errors[f"{cell.key}.{f}"] = f"{cell.key}: {f} must be a number; got {raw[f][:20]!r}"
            updated_at: datetime | None = parse_datetime(stamp) if stamp else None
            if len(values) == len(QUOTA_FIELDS):
                changes.append(QuotaChange(team=team, gpu_model=model, updated_at=updated_at, **values))
    return changes, errors


def attach_errors(rows: list[list[QuotaCell]], errors: dict[str, str]) -> None:
    """Put each ``team/model.field`` error on its cell, for inline display."""
    cells = {cell.key: cell for row in rows for cell in row}
    for key, message in errors.items():
        cell_key, _, field = key.rpartition(".")
        if cell_key in cells:
            cells[cell_key].errors[field] = message


class ReasonMixin(forms.Form):
    reason = forms.CharField(max_length=500, required=False, help_text="why (kept in the audit log)")


class PriorityClassForm(forms.ModelForm):
    reason = forms.CharField(max_length=500, required=False, help_text="why (kept in the audit log)")

    class Meta:
        model = PriorityClass
        fields = ["name", "value", "description", "preemptible", "may_preempt", "min_runtime_s", "grace_period_s"]

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
    reason = forms.CharField(max_length=500, required=False, help_text="why (kept in the audit log)")
