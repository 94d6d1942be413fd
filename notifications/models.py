"""Notifications: what each person wants to hear about their jobs, what they were told, and how each
message was delivered (e-mail, a signed webhook)."""

import secrets

from django.conf import settings
from django.db import models

# Events a person may subscribe to (scheduler.models.jobs states, seen as news).
JOB_STARTED = "job-started"
JOB_SUCCEEDED = "job-succeeded"
JOB_FAILED = "job-failed"  # failed, timed out or lost with its node
JOB_CANCELLED = "job-cancelled"
JOB_REQUEUED = "job-requeued"  # preempted, retried or moved off a lost node
JOB_PENDING_LONG = "job-pending-long"  # waiting longer than the person's pending_minutes
ARRAY_COMPLETED = "array-completed"
BUDGET_THRESHOLD = "budget-threshold"  # a team's monthly budget passed 50, 80 or 100 %
EVENTS = {
    JOB_STARTED: "a job started running",
    JOB_SUCCEEDED: "a job succeeded",
    JOB_FAILED: "a job failed, timed out or was lost with its node",
    JOB_CANCELLED: "a job was cancelled (or its dependency can never be met)",
    JOB_REQUEUED: "a job was preempted or retried and waits again",
    JOB_PENDING_LONG: "a job has waited longer than the minutes below",
    ARRAY_COMPLETED: "every task of a job array ended",
    BUDGET_THRESHOLD: "a team's monthly budget passed 50, 80 or 100 %",
}
DEFAULT_EVENTS = [JOB_FAILED, ARRAY_COMPLETED]


def new_secret() -> str:
    return secrets.token_urlsafe(32)


class NotificationPreference(models.Model):
    """One person's subscriptions: which ``events``, about whose jobs (``scope``: the jobs they submitted,
    or every job of the teams they belong to), by which channels; ``pending_minutes``: how long a job waits
    before "pending too long" is news. Webhook messages are signed with
    ``webhook_secret`` (HMAC-SHA256), which only its owner sees."""

    MINE = "mine"
    TEAM = "team"
    SCOPES = [(MINE, "jobs I submitted"), (TEAM, "every job of my teams")]

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                                related_name="notification_preference")
    events = models.JSONField(default=list, blank=True)
    scope = models.CharField(max_length=8, choices=SCOPES, default=MINE)
    email_enabled = models.BooleanField(default=True)
    webhook_url = models.URLField(max_length=500, blank=True)
    webhook_secret = models.CharField(max_length=64, default=new_secret)
    pending_minutes = models.PositiveIntegerField(default=60)  # for JOB_PENDING_LONG

    def __str__(self) -> str:
        return f"notifications of {self.user}"


class Notification(models.Model):
    """One event told to one person (also their in-portal list). ``key`` names the event (a job's
    transition, an array's completion): one person is told about one event once."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications")
    key = models.CharField(max_length=80)
    event = models.CharField(max_length=20, choices=list(EVENTS.items()))
    job = models.ForeignKey("scheduler.Job", null=True, blank=True, on_delete=models.CASCADE,
                            related_name="notifications")
    job_array = models.ForeignKey("scheduler.JobArray", null=True, blank=True, on_delete=models.CASCADE,
                                  related_name="notifications")
    message = models.CharField(max_length=500)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]
        constraints = [models.UniqueConstraint(fields=["user", "key"], name="notification_once_per_event")]


class Delivery(models.Model):
    """Sending one notification by one channel: its state, tries and the last error (the owner's delivery
    log). A delivery is claimed before it is sent, so no event is sent twice by a channel."""

    EMAIL = "email"
    WEBHOOK = "webhook"
    CHANNELS = [(EMAIL, "e-mail"), (WEBHOOK, "webhook")]
    PENDING, SENDING, SENT, FAILED = "pending", "sending", "sent", "failed"
    STATES = [(PENDING, PENDING), (SENDING, SENDING), (SENT, SENT), (FAILED, FAILED)]

    notification = models.ForeignKey(Notification, on_delete=models.CASCADE, related_name="deliveries")
    channel = models.CharField(max_length=8, choices=CHANNELS)
    target = models.CharField(max_length=500)  # the address or URL at the time of the event
    state = models.CharField(max_length=8, choices=STATES, default=PENDING)
    tries = models.PositiveIntegerField(default=0)
    last_error = models.CharField(max_length=500, blank=True)
    response_status = models.PositiveIntegerField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        constraints = [models.UniqueConstraint(fields=["notification", "channel"], name="delivery_once_per_channel")]
