"""Sending one delivery: an e-mail through Django's mail (SMTP), or a webhook POST of Slack-compatible JSON
signed with the owner's secret. A delivery is claimed (a guarded UPDATE) before it is sent, so a task that
runs twice never sends it twice; a failed try leaves it pending for the task's retry, or failed at the end.

Webhook signature: ``X-Rota-Signature: v1=<hex HMAC-SHA256 of "<X-Rota-Timestamp>." + body, keyed with the
secret>``, as Slack signs its requests: a receiver recomputes it and refuses old timestamps.
"""

import hashlib
import hmac
import ipaddress
import json
import socket
import time
from urllib.parse import urlsplit

import requests
from django.conf import settings
from django.core.mail import send_mail
from django.db.models import F
from django.urls import reverse
from django.utils import timezone

from notifications.models import Delivery, NotificationPreference

SENT, RETRY, FAILED = "sent", "retry", "failed"


class DeliveryError(Exception):
    """A try that failed; ``final`` when trying again cannot help (a refused address)."""

    def __init__(self, message: str, *, final: bool = False, status: int | None = None):
        super().__init__(message)
        self.final, self.status = final, status


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """The ``X-Rota-Signature`` header of ``body`` sent at ``timestamp``."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "v1=" + mac.hexdigest()


def _check_address(url: str) -> None:
    """Refuse a webhook whose host resolves to a private, loopback, link-local or reserved address (the
    portal must not be made to call its own network) unless ROTA_WEBHOOK_ALLOW_PRIVATE."""
    host = urlsplit(url).hostname or ""
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError as exc:
        raise DeliveryError(f"cannot resolve {host}: {exc}") from None
    if settings.ROTA_WEBHOOK_ALLOW_PRIVATE:
        return
    for info in infos:
        address = ipaddress.ip_address(info[4][0])
        if not address.is_global:
            raise DeliveryError(f"refused: {host} is a non-public address ({address})", final=True)


def _link(path: str) -> str:
    return settings.ROTA_PORTAL_URL + path


def _payload(delivery: Delivery) -> dict:
    note = delivery.notification
    job = note.job
    body = {"text": f"Rota: {note.message}", "event": note.event, "delivery": delivery.pk,
            "created_at": note.created_at.isoformat()}
    if job is not None:
        body["job"] = {"id": job.pk, "name": job.name, "team": job.team.name, "state": job.state,
                       "url": _link(reverse("job-detail", args=[job.pk]))}
    if note.job_array_id is not None:
        body["array"] = {"id": note.job_array_id,
                         "url": _link(f"{reverse('job-list')}?array={note.job_array_id}")}
    return body


def _send_webhook(delivery: Delivery) -> int:
    _check_address(delivery.target)
    secret = NotificationPreference.objects.filter(user_id=delivery.notification.user_id).values_list(
        "webhook_secret", flat=True).first() or ""
    body = json.dumps(_payload(delivery), separators=(",", ":")).encode()
    timestamp = str(int(time.time()))
    headers = {"Content-Type": "application/json", "User-Agent": "Rota-Webhook/1",
               "X-Rota-Event": delivery.notification.event, "X-Rota-Delivery": str(delivery.pk),
               "X-Rota-Timestamp": timestamp, "X-Rota-Signature": signature(secret, timestamp, body)}
    try:
        response = requests.post(delivery.target, data=body, headers=headers,
                                 timeout=settings.ROTA_WEBHOOK_TIMEOUT_S, allow_redirects=False)
    except requests.RequestException as exc:
        raise DeliveryError(f"{type(exc).__name__}: {exc}") from None
    if not 200 <= response.status_code < 300:
        raise DeliveryError(f"the receiver answered {response.status_code}", status=response.status_code)
    return response.status_code


def _send_email(delivery: Delivery) -> None:
    note = delivery.notification
    link = f"\n\n{_link(reverse('job-detail', args=[note.job_id]))}" if note.job_id else ""
    try:
        send_mail(subject=f"[Rota] {note.message[:150]}", message=f"{note.message}{link}\n",
                  from_email=settings.DEFAULT_FROM_EMAIL, recipient_list=[delivery.target])
    except OSError as exc:  # smtplib's errors are OSErrors too
        raise DeliveryError(f"{type(exc).__name__}: {exc}") from None


def delivery_send(delivery_id: int, *, last_try: bool) -> str:
    """Try delivery ``delivery_id`` once: SENT, RETRY (pending again) or FAILED (``last_try``, or a refusal
    that trying again cannot help). A delivery that is not pending (sent, failed, or being sent) is left
    alone and reported as it stands."""
    claimed = Delivery.objects.filter(pk=delivery_id, state=Delivery.PENDING).update(
        state=Delivery.SENDING, tries=F("tries") + 1)
    if not claimed:
        return Delivery.objects.filter(pk=delivery_id).values_list("state", flat=True).first() or FAILED
    delivery = Delivery.objects.select_related("notification", "notification__job__team").get(pk=delivery_id)
    try:
        status = _send_webhook(delivery) if delivery.channel == Delivery.WEBHOOK else _send_email(delivery)
    except DeliveryError as exc:
        state = Delivery.FAILED if (last_try or exc.final) else Delivery.PENDING
        Delivery.objects.filter(pk=delivery_id).update(state=state, last_error=str(exc)[:500],
                                                       response_status=exc.status)
        return FAILED if state == Delivery.FAILED else RETRY
    Delivery.objects.filter(pk=delivery_id).update(state=Delivery.SENT, sent_at=timezone.now(), last_error="",
                                                   response_status=status)
    return SENT
