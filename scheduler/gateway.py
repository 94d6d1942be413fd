"""The portal's gateway to inference services: ``/serve/<team>/<service>/<path>`` forwards a request to one of
the service's running, healthy replicas (jobs ``<service>`` or ``<service>-N`` of kind ``inference``), in turn
(round-robin), after checking the caller's service API key (``Authorization: Bearer <key>`` or
``X-Rota-Key``). A replica that refuses the connection is skipped and the next one tried; with none left the
answer is 502, with none running 503 (404 when the team has no such service at all: the caller holds one of
its keys, so this reveals nothing). A wrong, revoked or missing key, or an unknown team or service, is the
same 401, revealing nothing about which teams or services exist."""

import itertools
import re
import threading
import time
import urllib.error
import urllib.request

from django.http import HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from portal.models import Team
from scheduler.models import Job, ServiceKey, ServiceTraffic
from scheduler.models.jobs import JobState
from scheduler.selectors_services import service_exists
from scheduler.services.replica_health import ROUTABLE

FORWARD_TIMEOUT_S = 30
HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
              "transfer-encoding", "upgrade", "host", "content-length", "authorization", "x-rota-key", "cookie"}
_turns: dict[tuple[int, str], itertools.count] = {}
_turns_lock = threading.Lock()


def replicas(team: Team, service: str) -> list[Job]:
    """The service's running replicas that have reported an address and are healthy (or not probed: no
    ``ROTA_HEALTH_PATH``), in a stable order."""
    pattern = rf"^{re.escape(service)}(-[0-9]+)?$"
    return list(Job.objects.filter(team=team, kind="inference", state=JobState.RUNNING, name__regex=pattern,
                                   service_health__in=ROUTABLE)
                .exclude(service_address="").order_by("id"))


def _next_turn(team: Team, service: str) -> int:
    with _turns_lock:
        return next(_turns.setdefault((team.pk, service), itertools.count()))


def _presented_key(request) -> str:
    auth = request.headers.get("Authorization", "")
    if auth.startswith("Bearer "):
        return auth[len("Bearer "):].strip()
    return request.headers.get("X-Rota-Key", "").strip()


def _forward(request, address: str, path: str) -> HttpResponse:
    query = request.META.get("QUERY_STRING", "")
    url = f"http://{address}/{path}" + (f"?{query}" if query else "")
    headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
    req = urllib.request.Request(url, data=request.body or None, headers=headers, method=request.method)
    try:
        with urllib.request.urlopen(req, timeout=FORWARD_TIMEOUT_S) as upstream:
            status, body, upstream_headers = upstream.status, upstream.read(), upstream.headers
    except urllib.error.HTTPError as err:  # the replica answered with an error status: pass it on
        status, body, upstream_headers = err.code, err.read(), err.headers
    response = HttpResponse(body, status=status, content_type=upstream_headers.get("Content-Type"))
    response["X-Rota-Replica"] = address
    return response


@csrf_exempt
def serve(request, team: str, service: str, path: str = ""):
    team_obj = Team.objects.filter(name=team).first()
    if team_obj is None or not ServiceKey.admits(team_obj, service, _presented_key(request)):
        return JsonResponse({"detail": "A valid API key of this service is required (Authorization: Bearer)."},
                            status=401)
    began = time.monotonic()
    response = _route(request, team_obj, service, path)
    ServiceTraffic.record(team_obj, service, failed=response.status_code >= 500,
                          seconds=time.monotonic() - began)
    return response


def _route(request, team: Team, service: str, path: str) -> HttpResponse:
    running = replicas(team, service)
    if not running:
        if not service_exists(team, service):
            return JsonResponse({"detail": f"{team.name} has no inference service {service}."}, status=404)
        return JsonResponse({"detail": f"Service {service} has no running replica."}, status=503)
    start = _next_turn(team, service)
    for i in range(len(running)):
        address = running[(start + i) % len(running)].service_address
        try:
            return _forward(request, address, path)
        except (urllib.error.URLError, OSError):
            continue  # refused or unreachable: try the next replica
    return JsonResponse({"detail": f"No replica of {service} answered."}, status=502)
