"""Inference services as a whole: a service is the jobs of kind ``inference`` of one team named ``<service>``
or ``<service>-N`` (its replicas, each its own job, restarted on failure). Here: finding them, changing how
many run while it runs (``service_scale``, audited), and its autoscale settings (``service_autoscale_set``);
the autoscaler itself is ``scheduler.services.autoscale``.

Who may: members of the service's team (as for its API keys); to anyone else the team does not exist (404).
Scaling down cancels the highest-numbered replicas, whoever of the team submitted them."""

import re

from django.core.exceptions import ValidationError
from django.db import transaction

from portal.audit import audit_record
from portal.models import Team, slug_validator
from scheduler.models import InferenceService, Job
from scheduler.models.jobs import ACTIVE_STATES, StopReason
from scheduler.services.common import db_now
from scheduler.services.jobs import MAX_NAME, REQUEST_FIELDS, cancel_one, job_submit, wake_cycle

MAX_REPLICAS = 16  # replicas of one service, whether submitted, scaled or autoscaled
MAX_TARGET_RPS = 100_000.0
MAX_SCALE_DOWN_DELAY_S = 24 * 3600
_SUFFIX = re.compile(r"-([0-9]+)\Z")


def replica_pattern(service: str) -> str:
    """The regular expression (PostgreSQL's and Python's) the replicas' job names match."""
    return rf"^{re.escape(service)}(-[0-9]+)?$"


def replica_number(name: str, service: str) -> int:
    """A replica's number: N of ``<service>-N``; 0 for the bare ``<service>`` (a service of one)."""
    found = _SUFFIX.search(name[len(service):]) if name.startswith(service) else None
    return int(found.group(1)) if found else 0


def service_check_name(service: str) -> None:
    """A ValidationError naming ``service`` unless it is a slug of at most 100 characters."""
    try:
        slug_validator(service)
    except ValidationError as exc:
        raise ValidationError({"service": exc.messages}) from None
    if len(service) > MAX_NAME - 4:
        raise ValidationError({"service": [f"at most {MAX_NAME - 4} characters"]})


def service_replicas(team: Team, service: str, *, active: bool = True) -> list[Job]:
    """The service's replicas, lowest number first; with ``active`` only those waiting or holding GPUs and not
    being cancelled (a replica scaled down counts no more while its processes stop)."""
    jobs = Job.objects.filter(team=team, kind="inference", name__regex=replica_pattern(service))
    if active:
        jobs = jobs.filter(state__in=ACTIVE_STATES).exclude(stop_reason=StopReason.CANCEL)
    jobs = jobs.select_related("team", "gpu_model", "pool", "priority_class", "submitted_by")
    return sorted(jobs, key=lambda j: (replica_number(j.name, service), j.pk))


def service_settings(team: Team, service: str, *, lock: bool = False) -> InferenceService:
    """The service's settings row (made on first use); ``lock`` locks it for this transaction."""
    row, _ = InferenceService.objects.get_or_create(team=team, name=service)
    return InferenceService.objects.select_for_update().get(pk=row.pk) if lock else row


def _request_of(job: Job) -> dict:
    request = {f: getattr(job, f) for f in REQUEST_FIELDS}
    return request | {"team": job.team, "gpu_model": job.gpu_model.name if job.gpu_model else None,
                      "pool": job.pool.name if job.pool else None, "priority_class": job.priority_class.name}


def service_scale(*, user, team: Team, service: str, replicas: int, cause: str = "") -> dict:
    """Make ``replicas`` replicas of the service wait or run: new ones (``<service>-N`` after the highest N,
    copies of its newest replica, submitted as ``user``) or the highest-numbered cancelled. All or nothing;
    audited with ``cause`` (the autoscaler passes its reason and no user). Returns the ids started and
    cancelled and the count before and after."""
    service_check_name(service)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or not 0 <= replicas <= MAX_REPLICAS:
        raise ValidationError({"replicas": f"must be a whole number from 0 to {MAX_REPLICAS}"})
    with transaction.atomic():
        service_settings(team, service, lock=True)  # one scale of a service at a time
        active = service_replicas(team, service)
        started, cancelled = [], []
        if replicas > len(active):
            every = service_replicas(team, service, active=False)
            if not every:
                raise ValidationError({"service": f"{team.name} has no inference service {service} to scale"})
            template = max(every, key=lambda j: j.pk)
            submitter = user or template.submitted_by
            number = max(replica_number(j.name, service) for j in every)
            for _ in range(replicas - len(active)):
                number += 1
                request = _request_of(template) | {"name": f"{service}-{number}"}
                started.append(job_submit(user=submitter, **request).pk)
        now = db_now()
        why = cause or f"scaled by {user}"
        for job in reversed(active[replicas:]):
            if cancel_one(job.pk, user=user, now=now, cause=f"{why}: {service} to {replicas} replicas"[:300]):
                cancelled.append(job.pk)
        if started or cancelled:
            audit_record(actor=user, action="service.scale", object_type="service",
                         object_id=f"{team.name}/{service}", object_name=service,
                         before={"replicas": len(active)}, after={"replicas": replicas,
                                                                  "started": started, "cancelled": cancelled},
                         reason=cause)
            wake_cycle()
    return {"before": len(active), "replicas": replicas, "started": started, "cancelled": cancelled}


def service_autoscale_set(*, user, team: Team, service: str, enabled: bool, min_replicas: int = 1,
                          max_replicas: int = 1, target_rps: float = 10.0, scale_down_delay_s: int = 60
                          ) -> InferenceService:
    """Turn the service's autoscale on (between ``min_replicas`` and ``max_replicas``, ``target_rps`` requests
    per second per replica, scaling down after ``scale_down_delay_s`` of low traffic) or off; audited."""
    service_check_name(service)
    errors = {}
    for field, value, low, high in (("min_replicas", min_replicas, 1, MAX_REPLICAS),
                                    ("max_replicas", max_replicas, 1, MAX_REPLICAS),
                                    ("scale_down_delay_s", scale_down_delay_s, 0, MAX_SCALE_DOWN_DELAY_S)):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            errors[field] = f"must be a whole number from {low} to {high}"
    if isinstance(target_rps, bool) or not isinstance(target_rps, int | float) or not 0 < target_rps <= MAX_TARGET_RPS:
        errors["target_rps"] = f"must be a number of requests per second above 0 and at most {MAX_TARGET_RPS:g}"
    if not errors and min_replicas > max_replicas:
        errors["max_replicas"] = f"must be at least min_replicas ({min_replicas})"
    if errors:
        raise ValidationError(errors)
    if enabled and not service_replicas(team, service, active=False):
        raise ValidationError({"service": f"{team.name} has no inference service {service}"})
    with transaction.atomic():
        row = service_settings(team, service, lock=True)
        before = _autoscale_view(row)
        row.autoscale, row.min_replicas, row.max_replicas = enabled, min_replicas, max_replicas
        row.target_rps, row.scale_down_delay_s = float(target_rps), scale_down_delay_s
        row.low_since, row.sampled_at = None, None  # measure afresh
        row.save()
        audit_record(actor=user, action="service.autoscale", object_type="service",
                     object_id=f"{team.name}/{service}", object_name=service, before=before,
                     after=_autoscale_view(row))
    return row


def _autoscale_view(row: InferenceService) -> dict:
    return {"autoscale": row.autoscale, "min_replicas": row.min_replicas, "max_replicas": row.max_replicas,
            "target_rps": row.target_rps, "scale_down_delay_s": row.scale_down_delay_s}
