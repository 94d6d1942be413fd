"""Dependencies between jobs (Slurm's ``--dependency``): a job starts only once others have ended as asked."""

from django.db import models

from scheduler.models.jobs import Job


class JobDependency(models.Model):
    """``job`` may start only once ``on`` has ended as ``condition`` asks: ``afterok`` (it succeeded),
    ``afternotok`` (it ended any other way) or ``afterany`` (it ended at all). A dependency on an array is
    stored as one row per task. Rows only ever point at jobs that existed before ``job`` was submitted, so
    the graph has no cycles by construction."""

    AFTER_OK = "afterok"
    AFTER_NOT_OK = "afternotok"
    AFTER_ANY = "afterany"
    CONDITIONS = [(AFTER_OK, AFTER_OK), (AFTER_NOT_OK, AFTER_NOT_OK), (AFTER_ANY, AFTER_ANY)]

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="dependencies")
    on = models.ForeignKey(Job, on_delete=models.PROTECT, related_name="dependents")
    condition = models.CharField(max_length=12, choices=CONDITIONS)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["job", "on", "condition"], name="jobdep_unique"),
            models.CheckConstraint(condition=~models.Q(job=models.F("on")), name="jobdep_not_itself"),
            models.CheckConstraint(condition=models.Q(condition__in=["afterok", "afternotok", "afterany"]),
                                   name="jobdep_condition_valid"),
        ]
