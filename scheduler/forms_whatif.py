"""The what-if form: a period, the two stored policy versions to compare (both the active one by default), and
changes to quotas, priority values and pool sizes, each pre-filled with today's configuration so an admin edits
only what they want to try."""

from datetime import timedelta

from django import forms
from django.utils import timezone

from scheduler.models import Pool, PriorityClass, Quota
from scheduler.selectors_policies import policy_active, policy_version_choices
from scheduler.whatif import MAX_SCALE, PRIORITY_MAX, PRIORITY_MIN


class WhatIfForm(forms.Form):
    name = forms.CharField(max_length=120)
    period_start = forms.DateTimeField(widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
                                       label="Period start (UTC)")
    period_end = forms.DateTimeField(widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
                                     label="Period end (UTC)")
    # Left out: the active version, and the baseline's for the changed replay (``whatif.whatif_create``).
    baseline_policy = forms.TypedChoiceField(coerce=int, required=False, empty_value=None,
                                             label="Policy as configured", help_text=(
                                                 "the stored policy version the replay as configured runs under"))
    changed_policy = forms.TypedChoiceField(coerce=int, required=False, empty_value=None,
                                            label="Policy with the changes", help_text=(
                                                "pick another version (a draft policy, an older version) to "
                                                "compare two policies"))

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        now = timezone.now().replace(second=0, microsecond=0)
        self.fields["period_start"].initial = now - timedelta(days=7)
        self.fields["period_end"].initial = now
        choices, active = policy_version_choices(), policy_active().version
        for key in ("baseline_policy", "changed_policy"):
            self.fields[key].choices = choices
            self.fields[key].initial = active.pk if active is not None else None
        self.quota_rows = list(Quota.objects.filter(pool__isnull=True).select_related("team", "gpu_model"))
        for q in self.quota_rows:
            for key in ("guaranteed", "limit", "weight"):
                value = getattr(q, key)
                self.fields[f"q:{q.team.name}:{q.gpu_model.name}:{key}"] = forms.DecimalField(
                    required=False, min_value=0, max_digits=9, decimal_places=3, initial=value,
                    label=f"{q.team.name} {q.gpu_model.name} {key}")
        self.classes = list(PriorityClass.objects.all())
        for pc in self.classes:
            self.fields[f"p:{pc.name}"] = forms.IntegerField(initial=pc.value, label=f"{pc.name} value",
                                                             min_value=PRIORITY_MIN, max_value=PRIORITY_MAX)
        self.pools = list(Pool.objects.all())
        for pool in self.pools:
            self.fields[f"s:{pool.name}"] = forms.FloatField(initial=1.0, min_value=0, max_value=MAX_SCALE,
                                                             label=f"{pool.name} size factor")

    def quota_cells(self):
        """(quota, [bound fields]) for the template's matrix."""
        return [(q, [self[f"q:{q.team.name}:{q.gpu_model.name}:{k}"] for k in ("guaranteed", "limit", "weight")])
                for q in self.quota_rows]

    def changes(self) -> dict:
        """Only what differs from today's configuration."""
        data = self.cleaned_data
        quotas = []
        for q in self.quota_rows:
            row = {}
            for key in ("guaranteed", "limit", "weight"):
                value = data.get(f"q:{q.team.name}:{q.gpu_model.name}:{key}")
                if value is not None and value != getattr(q, key):
                    row[key] = float(value)
            if row:
                quotas.append({"team": q.team.name, "gpu_model": q.gpu_model.name, **row})
        priorities = {pc.name: data[f"p:{pc.name}"] for pc in self.classes
                      if data.get(f"p:{pc.name}") is not None and data[f"p:{pc.name}"] != pc.value}
        scale = {p.name: data[f"s:{p.name}"] for p in self.pools
                 if data.get(f"s:{p.name}") is not None and data[f"s:{p.name}"] != 1.0}
        return {"quotas": quotas, "priorities": priorities, "pool_scale": scale}
