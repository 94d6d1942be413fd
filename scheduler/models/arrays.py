"""Job arrays: one submission of many tasks, each task a job of its own."""

from django.conf import settings
from django.db import models

from portal.models import Team


class JobArray(models.Model):
    """One submission of ``size`` tasks (Slurm's job array): each task is a Job with ``array`` set to this
    row and its own ``array_index``; each is scheduled and accounted on its own. ``spec`` is what the user
    wrote (``"0-99%8"``); at most ``max_running`` of its tasks hold GPUs at once (null: no cap)."""

    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="job_arrays")
    submitted_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="job_arrays")
    name = models.CharField(max_length=100)
    spec = models.CharField(max_length=200)
    size = models.PositiveIntegerField()
    max_running = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.CheckConstraint(condition=models.Q(max_running__isnull=True) | models.Q(max_running__gte=1),
                                   name="jobarray_max_running_positive"),
        ]

    def __str__(self) -> str:
        return f"array {self.pk} {self.name} [{self.spec}]"
