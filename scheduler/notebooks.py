"""Notebooks reached through Rota: each notebook job runs a Jupyter server started with a random token of its
own and the base URL ``/notebooks/<id>/``; the portal's proxy (``scheduler.notebook_proxy``) is the only way
people reach it, for members of the owning team only, and injects the token server-side.

The token is made at each admission (a new attempt gets a new one) and stored encrypted (Fernet, with a key
derived from ``SECRET_KEY``): the node is told it in the job's environment (``JUPYTER_TOKEN``, which Jupyter
reads itself), people never see it. The server's own report of its last activity (``/api/status``) is probed
by beat (``notebooks_probe``) and counts for idle reclaim beside the GPUs' utilization."""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import secrets
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timedelta

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from scheduler.models import Job, NotebookServer
from scheduler.models.jobs import JobState

log = logging.getLogger(__name__)

KIND = "notebook"  # its default command (JupyterLab) is in scheduler.kinds
PROBE_TIMEOUT_S = 3.0
# A last activity probed longer ago than this is not trusted for idle reclaim (GPUs alone decide then).
PROBE_FRESH = timedelta(minutes=5)


def base_url(job_id: int) -> str:
    """Where the portal serves the notebook, and the base URL its server is started with."""
    return f"/notebooks/{job_id}/"


def notebook_url(job: Job) -> str | None:
    """The notebook's address in the portal while it runs (``None`` otherwise, or for other kinds)."""
    if job.kind != KIND or job.state != JobState.RUNNING or not job.service_port:
        return None
    return base_url(job.pk)


def _fernet() -> Fernet:
    digest = hashlib.sha256(b"rota.notebook-token:" + settings.SECRET_KEY.encode()).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def token_decrypt(server: NotebookServer) -> str | None:
    """The server's token, or None when it cannot be read (``SECRET_KEY`` changed since it was made)."""
    try:
        return _fernet().decrypt(server.token_encrypted.encode()).decode()
    except InvalidToken:
        return None


def server_prepare(job_id: int, attempt: int) -> None:
    """Give a notebook job's new attempt a fresh random token (called when the scheduler admits it)."""
    token = secrets.token_urlsafe(32)
    NotebookServer.objects.update_or_create(job_id=job_id, defaults={
        "attempt": attempt, "token_encrypted": _fernet().encrypt(token.encode()).decode(),
        "last_activity": None, "probed_at": None, "probe_error": ""})


def job_env(job: Job) -> dict[str, str]:
    """What a notebook job's node puts in its environment (``job.notebook_server`` is read: select it along):
    the token and the base URL. Empty for other kinds and before the scheduler admitted the attempt."""
    if job.kind != KIND:
        return {}
    try:
        server = job.notebook_server
    except NotebookServer.DoesNotExist:
        return {}
    token = token_decrypt(server) if server.attempt == job.attempt else None
    return {"JUPYTER_TOKEN": token, "ROTA_NOTEBOOK_BASE_URL": base_url(job.pk)} if token else {}


@dataclass(frozen=True, slots=True)
class Upstream:
    """Where the proxy forwards a notebook's requests, and the token it adds."""

    address: str  # host:port
    token: str


def upstream(job: Job) -> Upstream | None:
    """The running notebook's server, if it has reported an address and has a token of this attempt."""
    if job.kind != KIND or job.state != JobState.RUNNING or not job.service_address:
        return None
    server = NotebookServer.objects.filter(job=job, attempt=job.attempt).first()
    token = token_decrypt(server) if server else None
    return Upstream(job.service_address, token) if token else None


def last_activity_read(job: Job, target: Upstream) -> datetime:
    """Ask the notebook's server for its own last activity (Jupyter's ``GET <base>/api/status``, with the
    token); raises OSError (or ValueError for an answer without it) when it cannot tell."""
    request = urllib.request.Request(f"http://{target.address}{base_url(job.pk)}api/status",
                                     headers={"Authorization": f"token {target.token}"})
    with urllib.request.urlopen(request, timeout=PROBE_TIMEOUT_S) as answer:
        status = json.loads(answer.read())
    when = parse_datetime(str(status.get("last_activity") or ""))
    if when is None:
        raise ValueError("no last_activity in the server's /api/status")
    return when if timezone.is_aware(when) else timezone.make_aware(when, timezone.utc)


def notebooks_probe(now: datetime | None = None) -> int:
    """Record each running notebook's last activity as its server reports it; returns how many answered.
    A server that does not answer keeps its last reading, with the error and without a fresh ``probed_at``."""
    now = now or timezone.now()
    answered = 0
    for job in Job.objects.filter(kind=KIND, state=JobState.RUNNING).exclude(service_address="").order_by("pk"):
        target = upstream(job)
        if target is None:
            continue
        try:
            when = last_activity_read(job, target)
        except (OSError, ValueError, urllib.error.URLError) as error:
            NotebookServer.objects.filter(job=job, attempt=job.attempt).update(probe_error=str(error)[:300])
            continue
        answered += NotebookServer.objects.filter(job=job, attempt=job.attempt).update(
            last_activity=when, probed_at=now, probe_error="")
    return answered


def active_since(job_id: int, attempt: int, since: datetime, now: datetime) -> bool:
    """True when the notebook's server, probed recently (``PROBE_FRESH``), reported activity after ``since``.
    Unknown (never probed, or not lately) is False: the GPUs alone decide then."""
    row = (NotebookServer.objects.filter(job_id=job_id, attempt=attempt)
           .values_list("last_activity", "probed_at").first())
    if row is None or row[0] is None or row[1] is None or row[1] < now - PROBE_FRESH:
        return False
    return row[0] > since
