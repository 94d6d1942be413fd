"""Celery tasks of notifications: thin, named, ids in, safe to run twice. Enqueued after the commit of the
transition they are about (``scheduler.services.common.job_transition``), so the cycle never waits on them."""

from celery import shared_task
from django.conf import settings
from django.db import transaction

from notifications.budgets import budget_notify
from notifications.delivery import RETRY, delivery_send
from notifications.services import pending_notify, transition_notify
from scheduler.services.common import db_now


@shared_task(name="notifications.transition", time_limit=60, soft_time_limit=50, ignore_result=True)
def notify_transition(transition_id: int, **_ignored) -> int:
    """Record who is told about a job's transition, then send each delivery in its own task."""
    with transaction.atomic():
        made = transition_notify(transition_id)
        for delivery_id in made:
            deliver.delay_on_commit(delivery_id)
    return len(made)


@shared_task(name="notifications.deliver", bind=True, time_limit=60, soft_time_limit=50, ignore_result=True,
             max_retries=None)
def deliver(self, delivery_id: int, **_ignored) -> str:
    """Send one delivery; a failed try is retried after ROTA_NOTIFY_BACKOFF_S, doubling, ROTA_NOTIFY_TRIES
    tries in all."""
    tries = self.request.retries + 1
    outcome = delivery_send(delivery_id, last_try=tries >= settings.ROTA_NOTIFY_TRIES)
    if outcome == RETRY:
        raise self.retry(countdown=settings.ROTA_NOTIFY_BACKOFF_S * 2 ** (tries - 1))
    return outcome


@shared_task(name="notifications.periodic", time_limit=120, soft_time_limit=100, ignore_result=True)
def notify_periodic(**_ignored) -> int:
    """Tell who asked about jobs pending too long and budgets past a threshold (beat, every minute)."""
    with transaction.atomic():
        now = db_now()
        made = pending_notify(now) + budget_notify(now)
        for delivery_id in made:
            deliver.delay_on_commit(delivery_id)
    return len(made)
