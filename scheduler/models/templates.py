"""Saved job templates: a team's named presets for the submit form."""

from django.conf import settings
from django.db import models

from portal.models import Team
from scheduler.kinds import KIND_CHOICES


class JobTemplate(models.Model):
    """A named set of submit-form values (``fields``: the form's field names -> JSON values, no team) that
    members of ``team`` apply to prefill the submit form. Team-admins (and platform admins) create and
    delete them; tenant-owned, like jobs."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="job_templates")
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=20, choices=KIND_CHOICES, default="training")
    fields = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["team__name", "name"]
        constraints = [models.UniqueConstraint(fields=["team", "name"], name="jobtemplate_unique_team_name")]

    def __str__(self) -> str:
        return f"{self.team}/{self.name}"
