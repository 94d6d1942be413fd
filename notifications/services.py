"""Notification services: save a person's preferences; turn a job's transition into notifications for the
people who asked for it and may see the job, each with its deliveries (sent by ``notifications.tasks``)."""

import json
from datetime import timedelta
from urllib.parse import urlsplit

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.db.models import Max, Q

from notifications.models import (
    ARRAY_COMPLETED,
    EVENTS,
    JOB_CANCELLED,
    JOB_FAILED,
    JOB_PENDING_LONG,
    JOB_REQUEUED,
    JOB_STARTED,
    JOB_SUCCEEDED,
    Delivery,
    Notification,
    NotificationPreference,
    new_secret,
)
from portal.access import jobs_for
from portal.models import Membership
from scheduler.models import Job, JobTransition
from scheduler.models.jobs import ACTIVE_STATES, HOLDING_STATES, JobState
from scheduler.selectors import array_state_counts

User = get_user_model()
MAX_WEBHOOK_URL = 500
MIN_PENDING_MINUTES, MAX_PENDING_MINUTES = 5, 7 * 24 * 60
PENDING_PER_PASS = 200  # notifications one person gets from one pass (the rest come with the next)


def event_of(from_state: str, to_state: str) -> str | None:
    """The event a transition is news of, or None (admissions, holds and releases are not news)."""
    if to_state == JobState.RUNNING:
        return JOB_STARTED
    if to_state == JobState.SUCCEEDED:
        return JOB_SUCCEEDED
    if to_state in (JobState.FAILED, JobState.TIMED_OUT, JobState.NODE_LOST):
        return JOB_FAILED
    if to_state == JobState.CANCELLED:
        return JOB_CANCELLED
    if to_state == JobState.PENDING and from_state in HOLDING_STATES:
        return JOB_REQUEUED
    return None


def preference_for(user) -> NotificationPreference:
    """``user``'s preferences (unsaved defaults when they never saved any: they are told nothing)."""
    return (NotificationPreference.objects.filter(user=user).first()
            or NotificationPreference(user=user, events=[], email_enabled=True, webhook_secret=""))


def preference_save(*, user, events: list[str], scope: str, email_enabled: bool, webhook_url: str,
                    new_webhook_secret: bool = False, pending_minutes: int | None = None) -> NotificationPreference:
    """Save ``user``'s preferences; ValidationError names every bad field."""
    errors = {}
    if pending_minutes is not None and not MIN_PENDING_MINUTES <= pending_minutes <= MAX_PENDING_MINUTES:
        errors["pending_minutes"] = (f"must be between {MIN_PENDING_MINUTES} and {MAX_PENDING_MINUTES}; "
                                     f"got {pending_minutes}")
    unknown = [e for e in events if e not in EVENTS]
    if unknown:
        errors["events"] = f"unknown events {', '.join(map(str, unknown))}; known: {', '.join(EVENTS)}"
    if scope not in dict(NotificationPreference.SCOPES):
        errors["scope"] = f"must be one of {', '.join(dict(NotificationPreference.SCOPES))}; got {scope!r}"
    webhook_url = (webhook_url or "").strip()
    if len(webhook_url) > MAX_WEBHOOK_URL:
        errors["webhook_url"] = f"must be at most {MAX_WEBHOOK_URL} characters; got {len(webhook_url)}"
    elif webhook_url:
        parts = urlsplit(webhook_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            errors["webhook_url"] = "must be an http:// or https:// URL with a host"
    if email_enabled and events and not user.email:
        errors["email_enabled"] = "your account has no e-mail address; ask a platform admin to set one"
    if errors:
        raise ValidationError(errors)
    pref = preference_for(user)
    pref.events, pref.scope, pref.email_enabled, pref.webhook_url = list(dict.fromkeys(events)), scope, \
        email_enabled, webhook_url
    if pending_minutes is not None:
        pref.pending_minutes = pending_minutes
    if new_webhook_secret or not pref.webhook_secret:
        pref.webhook_secret = new_secret()
    pref.save()
    return pref


def _recipients(job: Job, event: str) -> list[NotificationPreference]:
    """The preferences that ask for ``event`` about ``job`` and whose owner may see it: its submitter, and
    members of its team who asked for every job of their teams. Access is checked through the access layer,
    so someone who left the team (or never was in it) is told nothing."""
    members = set(Membership.objects.filter(team_id=job.team_id).values_list("user_id", flat=True))
    prefs = NotificationPreference.objects.filter(user_id__in=members).select_related("user")
    chosen = [p for p in prefs if event in p.events and p.user.is_active
              and (p.user_id == job.submitted_by_id or p.scope == NotificationPreference.TEAM)]
    return [p for p in chosen if jobs_for(p.user).filter(pk=job.pk).exists()]


def transitions_wanted(transitions: list[JobTransition]) -> list[JobTransition]:
    """Those of ``transitions`` anyone could be told of: someone asked for its event (or, for an array's task,
    for the array's completion) and may be among ``_recipients``: an active member of the job's team who
    asked about every job of the team, or the job's submitter. Asked when the transitions are recorded, so
    that a transition nobody asked about costs no task: one fixed statement (``_WANTED_SQL``) for them all
    (a batch of a node's events records many), cheap beside the ORM's compiling of the same join. A superset
    of ``_recipients``: the task still checks access, the array's end and the preferences as they are when it
    runs."""
    news = [(t, event) for t in transitions if (event := event_of(t.from_state, t.to_state)) is not None]
    if not news:
        return []
    with connection.cursor() as cursor:
        cursor.execute(_WANTED_SQL, [[t.job_id for t, _ in news], [event for _, event in news],
                                     json.dumps([ARRAY_COMPLETED])])
        wanted = set(cursor.fetchall())
    return [t for t, event in news if (t.job_id, event) in wanted]


_WANTED_SQL = f"""
SELECT DISTINCT asked.job_id, asked.event FROM unnest(%s::bigint[], %s::text[]) AS asked(job_id, event)
WHERE EXISTS (SELECT 1 FROM "{Job._meta.db_table}" job
    JOIN "{Membership._meta.db_table}" member ON member.team_id = job.team_id
    JOIN "{NotificationPreference._meta.db_table}" pref ON pref.user_id = member.user_id
    JOIN "{User._meta.db_table}" person ON person.id = pref.user_id AND person.is_active
    WHERE job.id = asked.job_id AND (pref.scope = '{NotificationPreference.TEAM}' OR pref.user_id = job.submitted_by_id)
      AND (pref.events @> jsonb_build_array(asked.event)
           OR (job.array_id IS NOT NULL AND pref.events @> %s::jsonb)))"""


def notification_record(pref: NotificationPreference, *, key: str, event: str, message: str, job: Job | None,
                        job_array=None) -> list[int]:
    """Record one notification for ``pref``'s owner and its deliveries; [] if they were already told."""
    try:
        with transaction.atomic():
            note = Notification.objects.create(user=pref.user, key=key, event=event, job=job, job_array=job_array,
                                               message=message[:500])
    except IntegrityError:
        return []  # told already (a task that ran twice)
    deliveries = []
    if pref.email_enabled and pref.user.email:
        deliveries.append(Delivery(notification=note, channel=Delivery.EMAIL, target=pref.user.email))
    if pref.webhook_url:
        deliveries.append(Delivery(notification=note, channel=Delivery.WEBHOOK, target=pref.webhook_url))
    return [d.pk for d in Delivery.objects.bulk_create(deliveries)]


def transition_notify(transition_id: int) -> list[int]:
    """Notify whoever asked about the event of transition ``transition_id`` (and, when it ended the last
    task of an array, about the array's completion). Returns the new deliveries' ids. Safe to run twice."""
    transition = (JobTransition.objects.select_related("job", "job__team", "job__array")
                  .filter(pk=transition_id).first())
    event = event_of(transition.from_state, transition.to_state) if transition else None
    if event is None:
        return []
    job = transition.job
    message = f"job {job.pk} {job.name} ({job.team.name}): {transition.to_state}: {transition.cause}"
    made = []
    for pref in _recipients(job, event):
        made += notification_record(pref, key=f"transition:{transition.pk}", event=event, message=message,
                                    job=job)
    if job.array_id and not Job.objects.filter(array_id=job.array_id, state__in=ACTIVE_STATES).exists():
        job_array = job.array
        counts = array_state_counts([job_array.pk])[job_array.pk]
        summary = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
        text = f"array {job_array.pk} {job_array.name} ({job.team.name}) ended: {summary}"
        for pref in _recipients(job, ARRAY_COMPLETED):
            made += notification_record(pref, key=f"array:{job_array.pk}", event=ARRAY_COMPLETED, message=text,
                                        job=job, job_array=job_array)
    return made


def pending_notify(now) -> list[int]:
    """Tell each person who asked for JOB_PENDING_LONG about the pending jobs (theirs, or their teams') that
    have waited longer than their ``pending_minutes`` since they last joined the queue: once per job and
    attempt. Returns the new deliveries' ids. Safe to run twice or concurrently."""
    made = []
    for pref in NotificationPreference.objects.filter(events__contains=[JOB_PENDING_LONG]).select_related("user"):
        if not pref.user.is_active:
            continue
        since = now - timedelta(minutes=pref.pending_minutes)
        jobs = jobs_for(pref.user).filter(state=JobState.PENDING).annotate(
            queued_at=Max("transitions__at", filter=Q(transitions__to_state=JobState.PENDING))
        ).filter(queued_at__lt=since)
        if pref.scope == NotificationPreference.MINE:
            jobs = jobs.filter(submitted_by=pref.user)
        else:  # every job of the teams they belong to (a platform admin's scope too)
            jobs = jobs.filter(team__memberships__user=pref.user)
        candidates = {f"pending:{job.pk}:{job.attempt}": job for job in jobs.order_by("pk")[:PENDING_PER_PASS * 2]}
        told = set(Notification.objects.filter(user=pref.user, key__in=candidates).values_list("key", flat=True))
        for key, job in [(k, j) for k, j in candidates.items() if k not in told][:PENDING_PER_PASS]:
            waited = int((now - job.queued_at).total_seconds() // 60)
            reason = f": {job.pending_reason_code} {job.pending_reason_message}" if job.pending_reason_code else ""
            message = f"job {job.pk} {job.name} ({job.team.name}) has waited {waited} min{reason}"
            made += notification_record(pref, key=key, event=JOB_PENDING_LONG, message=message, job=job)
    return made
