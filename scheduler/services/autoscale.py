"""The autoscaler of inference services: every ``ROTA_AUTOSCALE_INTERVAL_S`` (a Celery beat task) each service
with autoscale on is measured and, when its request rate calls for it, scaled between its min and max.

The rate is what the gateway counted (``ServiceTraffic.requests``) since the previous evaluation, per second.
With a target of T requests per second per replica and R requests per second:

* **up** at once to ``ceil(R / T)`` replicas (at most max) when that is more than run now;
* **down** only when the traffic would fit fewer replicas each below ``DOWN_FRACTION`` of the target, i.e.
  ``ceil(R / (T * DOWN_FRACTION))`` (at least min) is fewer than run now, and has fitted them for the whole
  ``scale_down_delay_s``: a short lull or a rate near a boundary never makes it flap (hysteresis);
* back into [min, max] at once when the count is outside (someone scaled it by hand).

Each decision is kept on the service (its page shows it) and each scale is audited with its reason."""

import math
from dataclasses import dataclass

from django.core.exceptions import ValidationError
from django.db import transaction

from portal.locks import AUTOSCALE, try_xact_lock
from scheduler.models import InferenceService, ServiceTraffic
from scheduler.services.common import db_now
from scheduler.services.inference import service_replicas, service_scale

DOWN_FRACTION = 0.7


@dataclass(frozen=True)
class Decision:
    """What the autoscaler makes of one measurement: the replicas wanted (None: keep) and why."""

    replicas: int | None
    why: str
    low: bool  # the traffic fits fewer replicas (the scale-down delay runs)


def autoscale_decide(*, current: int, rate: float, target: float, lowest: int, highest: int,
                     low_for_s: float | None, delay_s: float) -> Decision:
    """Pure: the decision for ``current`` replicas serving ``rate`` requests/s at ``target`` per replica,
    kept between ``lowest`` and ``highest``; ``low_for_s`` is how long the traffic has fitted fewer replicas
    (None: it did not at the last evaluation)."""
    measured = f"{rate:.2f} req/s on {current} replica{'s' if current != 1 else ''} (target {target:g} per replica)"
    if current < lowest or current > highest:
        wanted = min(max(current, lowest), highest)
        return Decision(wanted, f"{measured}: back within {lowest}-{highest}", False)
    up = min(highest, math.ceil(rate / target))
    if up > current:
        return Decision(up, f"{measured}: up to {up}", False)
    down = max(lowest, math.ceil(rate / (target * DOWN_FRACTION)))
    if down >= current:
        return Decision(None, f"{measured}: keep {current}", False)
    waited = low_for_s or 0.0
    if waited < delay_s:
        return Decision(None, f"{measured}: fits {down}, waiting {waited:.0f} of {delay_s:g} s to scale down", True)
    return Decision(down, f"{measured}: down to {down} after {waited:.0f} s of low traffic", True)


def services_autoscale() -> list[str]:
    """Evaluate every service with autoscale on (single-flight); returns the decisions made, one line each."""
    with transaction.atomic():
        if not try_xact_lock(AUTOSCALE):
            return []  # another evaluation runs
        return [_evaluate(row) for row in
                InferenceService.objects.filter(autoscale=True).select_related("team").order_by("pk")]


def _evaluate(row: InferenceService) -> str:
    now = db_now()
    requests = (ServiceTraffic.objects.filter(team=row.team, service=row.name)
                .values_list("requests", flat=True).first() or 0)
    if row.sampled_at is None or requests < row.sampled_requests:
        InferenceService.objects.filter(pk=row.pk).update(sampled_at=now, sampled_requests=requests)
        return f"{row}: first sample"
    seconds = max((now - row.sampled_at).total_seconds(), 1e-3)
    rate = (requests - row.sampled_requests) / seconds
    current = len(service_replicas(row.team, row.name))
    low_for = (now - row.low_since).total_seconds() if row.low_since else None
    decision = autoscale_decide(current=current, rate=rate, target=row.target_rps, lowest=row.min_replicas,
                                highest=row.max_replicas, low_for_s=low_for, delay_s=row.scale_down_delay_s)
    why = decision.why
    if decision.replicas is not None and decision.replicas != current:
        try:
            service_scale(user=None, team=row.team, service=row.name, replicas=decision.replicas,
                          cause=f"autoscale: {why}")
        except ValidationError as exc:
            why = f"{why}: could not scale: {'; '.join(m for ms in exc.message_dict.values() for m in ms)}"
    low_since = (row.low_since or now) if decision.low and decision.replicas is None else None
    InferenceService.objects.filter(pk=row.pk).update(
        sampled_at=now, sampled_requests=requests, rate_rps=rate, low_since=low_since,
        last_decision=why[:300], last_decision_at=now)
    return f"{row}: {why}"
