"""When the scheduler's periodic work last completed: so a stopped worker or beat is seen, not guessed."""

from django.db import models


class SchedulerBeat(models.Model):
    """One row per periodic task (``cycle``, ``liveness``): when it last completed. Written in the task's
    own transaction, so a task that crashes or rolls back leaves the previous time in place."""

    CYCLE = "cycle"
    LIVENESS = "liveness"

    name = models.CharField(max_length=20, primary_key=True)
    at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.name} at {self.at:%Y-%m-%d %H:%M:%S}"

    @classmethod
    def record(cls, name: str, at) -> None:
        """One statement (INSERT … ON CONFLICT UPDATE), the same on the first run as on every later one."""
        cls.objects.bulk_create([cls(name=name, at=at)], update_conflicts=True, unique_fields=["name"],
                                update_fields=["at"])
