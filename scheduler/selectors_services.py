"""Reads of an inference service for its page, its API and the CLI: its replicas (node, address, health,
restarts and the last restart's cause), its traffic (requests, failures, mean and percentile latency from the
gateway's histogram) and its autoscale settings and last decision. A fixed number of queries."""

from django.http import Http404

from portal.models import Team
from scheduler.models import Allocation, InferenceService, Job, JobTransition, ServiceKey, ServiceTraffic
from scheduler.models.gateway import LATENCY_BUCKETS
from scheduler.services.inference import replica_pattern, service_replicas
from scheduler.services.service_keys import team_of_member

QUANTILES = (0.5, 0.95, 0.99)


def service_exists(team: Team, service: str) -> bool:
    """Whether ``team`` has an inference service ``service``: a job of kind ``inference`` named ``<service>`` or
    ``<service>-N``, in any state (a service whose replicas all ended still has its page, keys and traffic)."""
    return Job.objects.filter(team=team, kind="inference", name__startswith=service,
                              name__regex=replica_pattern(service)).exists()


def service_of_member(user, team_name: str, service: str) -> Team:
    """The team of ``team_name``'s inference service ``service`` when ``user`` is one of its members and the
    service exists, else 404: an outsider hears the same as for a missing team, a member that no such
    service exists (no page, no keys for it)."""
    team = team_of_member(user, team_name)
    if not service_exists(team, service):
        raise Http404("No such inference service.")
    return team


def latency_quantile(counts: list[int], q: float) -> float | None:
    """The ``q`` quantile (0-1) of a latency histogram (``counts[i]`` requests in bucket i of
    ``LATENCY_BUCKETS``, not cumulative), interpolated within its bucket as Prometheus'
    ``histogram_quantile`` does; None without requests. In the last (+Inf) bucket: the bucket's lower bound."""
    total = sum(counts)
    if not total:
        return None
    rank, seen = q * total, 0
    for i, count in enumerate(counts):
        if count and seen + count >= rank:
            lower = LATENCY_BUCKETS[i - 1] if i else 0.0
            upper = LATENCY_BUCKETS[i]
            if upper == float("inf"):
                return lower
            return lower + (upper - lower) * (rank - seen) / count
        seen += count
    return LATENCY_BUCKETS[-2]


def service_traffic(team: Team, service: str) -> dict:
    """Requests, failed, mean latency and the ``QUANTILES`` of latency (seconds; None without requests)."""
    traffic = ServiceTraffic.objects.filter(team=team, service=service).first()
    counts = [0] * len(LATENCY_BUCKETS)
    if traffic is not None:
        for bucket, count in traffic.latency.values_list("bucket", "count"):
            counts[bucket] = count
    requests = traffic.requests if traffic else 0
    return {
        "requests": requests,
        "failed": traffic.failed if traffic else 0,
        "mean_latency_s": traffic.seconds_total / requests if requests else None,
        "latency_s": {f"p{round(q * 100)}": latency_quantile(counts, q) for q in QUANTILES},
    }


def service_summary(team: Team, service: str) -> dict:
    """Everything the service page shows, as plain data (the API answers it as is)."""
    replicas = service_replicas(team, service)
    ids = [job.pk for job in replicas]
    nodes: dict[int, str] = {}
    for job_id, node in (Allocation.objects.filter(job_id__in=ids, ended_at__isnull=True)
                         .values_list("job_id", "node__name").order_by("job_id", "node__name")):
        nodes.setdefault(job_id, node)
    causes: dict[int, tuple] = {}
    for job_id, at, cause in (JobTransition.objects.filter(job_id__in=ids, cause__contains="restarting in")
                              .values_list("job_id", "at", "cause").order_by("job_id", "-at")):
        causes.setdefault(job_id, (at, cause))
    settings = InferenceService.objects.filter(team=team, name=service).first() or InferenceService(
        team=team, name=service)
    return {
        "team": team.name,
        "service": service,
        "replicas": [{
            "id": job.pk, "name": job.name, "state": job.state, "node": nodes.get(job.pk, ""),
            "address": job.service_address if job.state == "running" else "",
            "health": job.service_health if job.state == "running" else "",
            "health_message": job.service_health_message if job.state == "running" else "",
            "attempt": job.attempt, "restarts": job.attempt - 1,
            "last_restart_at": causes[job.pk][0] if job.pk in causes else None,
            "last_restart_cause": causes[job.pk][1] if job.pk in causes else "",
        } for job in replicas],
        "traffic": service_traffic(team, service),
        "autoscale": {
            "enabled": settings.autoscale, "min_replicas": settings.min_replicas,
            "max_replicas": settings.max_replicas, "target_rps": settings.target_rps,
            "scale_down_delay_s": settings.scale_down_delay_s, "rate_rps": settings.rate_rps,
            "last_decision": settings.last_decision, "last_decision_at": settings.last_decision_at,
        },
        "keys_live": ServiceKey.objects.filter(team=team, service=service, revoked_at__isnull=True).count(),
    }
