"""A notebook job's server as Rota knows it: the token it was started with (encrypted) and the last activity
it reported (Jupyter's ``/api/status``)."""

from django.db import models

from scheduler.models.jobs import Job


class NotebookServer(models.Model):
    """One per notebook job, replaced at each admission (a new attempt gets a new token). ``token_encrypted``
    is the server's random token, encrypted with a key derived from ``SECRET_KEY``
    (``scheduler.notebooks.tokens``): the portal's proxy injects it, nobody is shown it. ``last_activity`` is
    what the server last reported as its own last activity (kernels, terminals, requests), ``probed_at`` when
    the portal last asked, ``probe_error`` why the last probe failed (blank when it answered)."""

    job = models.OneToOneField(Job, on_delete=models.CASCADE, related_name="notebook_server")
    attempt = models.PositiveIntegerField()
    token_encrypted = models.TextField()
    last_activity = models.DateTimeField(null=True, blank=True)
    probed_at = models.DateTimeField(null=True, blank=True)
    probe_error = models.CharField(max_length=300, blank=True, default="")

    def __str__(self) -> str:
        return f"notebook server of job {self.job_id} (attempt {self.attempt})"
