"""The node API (docs/node-protocol.md): a node authenticates with its own token and reports only about
itself and its own allocations. Nodes cannot reach user endpoints and users cannot reach these."""

import functools
import re
import threading
from functools import cached_property

from django.conf import settings
from django.db.models.expressions import RawSQL
from django.db.models.functions import Now
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed, ValidationError
from rest_framework.permissions import BasePermission
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api import SharedFields
from portal.dbrows import CompiledQuery, ModelRows
from portal.throttle import NodeThrottle
from scheduler import wake
from scheduler.agent.gpu.models import model_slug
from scheduler.api.plain import plain_validated
from scheduler.models import Node, NodeToken, Pool
from scheduler.models.cluster import hash_token
from scheduler.models.jobs import FailureReason
from scheduler.services import node_cadence, node_jobs, reference, replica_health
from scheduler.services import nodes as node_services
from scheduler.services.node_events import node_event_apply

MAX_GPUS_PER_NODE = 64
MAX_TELEMETRY = 2000
MAX_LOG_CHUNK = 1024 * 1024
MAX_ATTEMPT = 2**31 - 1  # the attempt columns are integers
MAX_BIGINT = 2**63 - 1
# A GPU's model as the agent reports it: Rota's slug, which scheduler/agent/gpu/models.py derives from the
# driver's device name ("h100-80gb", "a100-1g.10gb", "rtx4090-24gb"), or that device name itself ("NVIDIA
# H100 80GB HBM3"), turned into the slug the same way here. Both name a size or product number (a digit).
GPU_MODEL_SLUG = re.compile(r"[a-z0-9]+(?:[-.+][a-z0-9]+)*")
# host:port of a job's service: a host name or IPv4 address, or a bracketed IPv6 address, and a port
SERVICE_ADDRESS = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})|\[[0-9A-Fa-f:.]{2,45}\]):[0-9]{1,5}")
GPU_DEVICE_NAME = re.compile(r"[A-Za-z0-9]+(?:[ ._()/+-]+[A-Za-z0-9]+)*\)?")


class NodePrincipal:
    """The authenticated caller of the node API: a node, never a user."""

    is_authenticated = True
    is_staff = False
    is_node = True

    def __init__(self, node):
        self.node = node
        self.pk = f"node:{node.pk}"

    def __str__(self) -> str:
        return f"node {self.node.name}"


# The node token that works now (rotated tokens work until their grace runs out), its node, the node's pool and
# the reference version, in one row: the same query at every request of every node, compiled once.
_TOKEN = ModelRows(NodeToken)
_NODE = ModelRows(Node, prefix="node__", start=_TOKEN.end)
_POOL = ModelRows(Pool, prefix="node__pool__", start=_NODE.end)
_TOKEN_QUERY = CompiledQuery(
    lambda token_hash: NodeToken.objects.filter(token_hash=token_hash).filter(NodeToken.usable_at(Now()))
    .annotate(reference_version=RawSQL(reference.VERSION_SQL, ()))
    .values_list(*_TOKEN.names, *_NODE.names, *_POOL.names, "reference_version")[:1],
    token_hash="(the token's hash)",
)


class NodeTokenAuthentication(BaseAuthentication):
    """``Authorization: Node <token>``; only hashes are stored; revoked tokens fail (read at each request, in one
    query with its node and pool). The same query reads the reference version, kept on the request for the
    view's lookups (``reference.of_request``: a heartbeat's kind images), which then cost no query of their own."""

    keyword = b"node"

    def authenticate(self, request):
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != self.keyword:
            return None
        if len(parts) != 2:
            raise AuthenticationFailed("Authorization must be 'Node <token>'")
        rows = _TOKEN_QUERY.rows(token_hash=hash_token(parts[1].decode(errors="replace")))
        if not rows:
            raise AuthenticationFailed("unknown or revoked node token")
        row = rows[0]
        token, node, pool = _TOKEN.build(row), _NODE.build(row), _POOL.build(row)
        node.pool = pool
        token.node = node
        request.reference = reference.at(row[_POOL.end])
        return NodePrincipal(node), token

    def authenticate_header(self, request):
        return "Node"


class IsNode(BasePermission):
    def has_permission(self, request, view):
        return getattr(request.user, "is_node", False)


class GpuReportSerializer(serializers.Serializer):
    index = serializers.IntegerField(min_value=0, max_value=1023)
    uuid = serializers.CharField(max_length=80)
    model = serializers.CharField(max_length=80)
    name = serializers.CharField(max_length=120, required=False, allow_blank=True)
    memory_mb = serializers.IntegerField(min_value=1, max_value=10_000_000)
    mig = serializers.BooleanField(required=False, default=False)

    def validate(self, attrs):
        """Every model a node reports becomes a cluster-wide GPU model: refuse what no driver calls a GPU."""
        model = attrs["model"].strip()
        named = any(c.isdigit() for c in model) and any(c.isalpha() for c in model)
        if named and GPU_MODEL_SLUG.fullmatch(model):
            slug = model
        elif named and GPU_DEVICE_NAME.fullmatch(model):
            slug = model_slug(model, attrs["memory_mb"])
        else:
            slug = ""
        if len(slug) <= 63 and GPU_MODEL_SLUG.fullmatch(slug):  # GpuModel.name
            attrs["model"] = slug
        else:
            raise serializers.ValidationError(
                {"model": f"{model[:80]!r} is not a GPU model: send Rota's slug (h100-80gb, a100-1g.10gb) or "
                          "the driver's device name (NVIDIA H100 80GB HBM3)"}
            )
        return attrs


class EngineStateSerializer(serializers.Serializer):
    """What the engine that launches a node's work (Slurm) says of the node: see ``services/node_engine.py``."""

    name = serializers.ChoiceField(choices=["slurm"])
    state = serializers.ChoiceField(choices=["ready", "draining", "drained", "down"])
    reason = serializers.CharField(max_length=250, required=False, allow_blank=True, default="")


LABEL_KEY = re.compile(r"[a-z0-9][a-z0-9._/-]{0,62}")
MAX_LABELS = 64


class ExecutorSerializer(serializers.Serializer):
    """How the node runs jobs: the agent's container or process executor, or the Slurm bridge's ``slurm`` (which
    isolates when it runs each job as its team's uid). A process executor never isolates tenants, whatever it
    says."""

    name = serializers.ChoiceField(choices=["container", "process", "slurm"])
    isolates = serializers.BooleanField()
    runtime = serializers.CharField(max_length=80, required=False, allow_blank=True, default="")
    detail = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")

    def validate(self, attrs):
        if attrs["name"] == "process":
            attrs["isolates"] = False
        return attrs


class RegisterSerializer(SharedFields, serializers.Serializer):
    hostname = serializers.CharField(max_length=255, required=False, allow_blank=True)
    agent_version = serializers.CharField(max_length=40, required=False, allow_blank=True, default="")
    gpu_backend = serializers.CharField(max_length=20, required=False, allow_blank=True, default="")
    driver_version = serializers.CharField(max_length=40, required=False, allow_blank=True, default="")
    cuda_version = serializers.CharField(max_length=20, required=False, allow_blank=True, default="")
    cpus = serializers.IntegerField(min_value=0, max_value=100_000, default=0)
    memory_mb = serializers.IntegerField(min_value=0, max_value=10**12, default=0)
    gpus = GpuReportSerializer(many=True, max_length=MAX_GPUS_PER_NODE)
    # Sent by the Slurm bridge (node features); absent, the node's labels stay as an admin set them.
    labels = serializers.DictField(child=serializers.CharField(max_length=63), required=False)
    engine = EngineStateSerializer(required=False)

    def validate_labels(self, labels):
        if len(labels) > MAX_LABELS:
            raise serializers.ValidationError(f"at most {MAX_LABELS} labels; got {len(labels)}")
        bad = sorted(key for key in labels if not LABEL_KEY.fullmatch(key))
        if bad:
            raise serializers.ValidationError(f"label keys must be 1-63 lowercase letters, digits and . _ / -; "
                                              f"got {', '.join(repr(k[:70]) for k in bad[:5])}")
        return labels
    executor = ExecutorSerializer(required=False)

    def validate_gpus(self, gpus):
        indexes = [g["index"] for g in gpus]
        uuids = [g["uuid"] for g in gpus]
        if len(set(indexes)) != len(indexes) or len(set(uuids)) != len(uuids):
            raise serializers.ValidationError("GPU indexes and UUIDs must be unique")
        return gpus


class RunningSerializer(serializers.Serializer):
    job_id = serializers.IntegerField(min_value=1, max_value=MAX_BIGINT)
    attempt = serializers.IntegerField(min_value=1, max_value=MAX_ATTEMPT)
    pid = serializers.IntegerField(min_value=0, required=False, allow_null=True)
    state = serializers.CharField(max_length=20, required=False)
    # a probed service's health (scheduler/agent/probes.py); absent when the attempt is not probed
    health = serializers.ChoiceField(choices=replica_health.HEALTH_STATES, required=False)
    health_message = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")


class GpuHealthSerializer(serializers.Serializer):
    uuid = serializers.CharField(max_length=80)
    healthy = serializers.BooleanField()
    reason = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")


class TelemetrySerializer(serializers.Serializer):
    """One sample; metrics a device does not support are null. Ranges reject garbage, not real values."""

    uuid = serializers.CharField(max_length=80)
    at = serializers.DateTimeField()
    util_pct = serializers.FloatField(min_value=0, max_value=100, required=False, allow_null=True)
    mem_used_mb = serializers.FloatField(min_value=0, max_value=10_000_000, required=False, allow_null=True)
    temperature_c = serializers.FloatField(min_value=-50, max_value=200, required=False, allow_null=True)
    power_w = serializers.FloatField(min_value=0, max_value=10_000, required=False, allow_null=True)
    sm_clock_mhz = serializers.FloatField(min_value=0, max_value=100_000, required=False, allow_null=True)
    ecc_uncorrected = serializers.IntegerField(min_value=0, max_value=MAX_BIGINT, required=False, allow_null=True)
    xid = serializers.IntegerField(min_value=0, max_value=100_000, required=False, allow_null=True)


class HeartbeatSerializer(SharedFields, serializers.Serializer):
    seq = serializers.IntegerField(min_value=1, max_value=2**62)
    running = RunningSerializer(many=True, required=False, max_length=1024)
    gpus = GpuHealthSerializer(many=True, required=False, max_length=MAX_GPUS_PER_NODE)
    telemetry = TelemetrySerializer(many=True, required=False, max_length=MAX_TELEMETRY)
    engine = EngineStateSerializer(required=False)


class EventSerializer(serializers.Serializer):
    attempt = serializers.IntegerField(min_value=1, max_value=MAX_ATTEMPT)
    type = serializers.ChoiceField(choices=["started", "exited", "stopped", "start_failed", "checkpoint"])
    pid = serializers.IntegerField(required=False, allow_null=True)
    exit_code = serializers.IntegerField(required=False, allow_null=True, min_value=-255, max_value=255)
    signal = serializers.IntegerField(required=False, allow_null=True, min_value=0, max_value=128)
    message = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")
    reason = serializers.ChoiceField(choices=FailureReason.choices, required=False, default="")
    at = serializers.CharField(max_length=40, required=False, allow_blank=True)
    # started: host:port the portal's gateway reaches the job's service on
    address = serializers.RegexField(SERVICE_ADDRESS, max_length=300, required=False, allow_blank=True,
                                     default="", error_messages={"invalid": "address: must be host:port"})
    # started: "starting" when the node probes the service's health (it gets traffic once healthy)
    health = serializers.ChoiceField(choices=replica_health.STARTED_HEALTH, required=False, default="")

    def to_internal_value(self, data):
        """DRF's walk over the fields, unless every value is plainly valid (``plain_validated``: an agent's
        events, but for a service's address): then the same data, read at a fraction of the CPU (a batch of
        events is most of the portal's work at the full size)."""
        validated = plain_validated(self._field_pairs, data)
        return super().to_internal_value(data) if validated is None else validated

    @cached_property
    def _field_pairs(self) -> tuple:
        """The bound fields as ``(name, field)`` once per serializer (a batch's events share its one child)."""
        return tuple(self.fields.items())

    def validate(self, attrs):
        if attrs["type"] == "checkpoint":  # when the file changed, by the node's clock (never in the portal's future)
            try:
                attrs["at"] = serializers.DateTimeField().run_validation(attrs.get("at") or None)
            except ValidationError as exc:
                raise ValidationError({"at": exc.detail}) from None
        return attrs


class LogSerializer(serializers.Serializer):
    attempt = serializers.IntegerField(min_value=1, max_value=MAX_ATTEMPT)
    offset = serializers.IntegerField(min_value=0, max_value=MAX_BIGINT)
    data = serializers.CharField(max_length=MAX_LOG_CHUNK, allow_blank=True, trim_whitespace=False)


class WaitSerializer(SharedFields, serializers.Serializer):
    timeout_s = serializers.FloatField(min_value=0, max_value=300, required=False)
    assignments = serializers.BooleanField(required=False, default=False)


class NodeAPIView(APIView):
    authentication_classes = [NodeTokenAuthentication]
    permission_classes = [IsNode]
    throttle_classes = [NodeThrottle]
    input_serializer: type[serializers.Serializer]

    def parsed(self, request) -> dict:
        data = self.input_serializer(data=request.data)
        data.is_valid(raise_exception=True)
        return data.validated_data

    def call(self, fn, **kwargs):
        try:
            return fn(**kwargs)
        except node_services.NodeProtocolError as exc:
            body = {"detail": str(exc)}
            if exc.field:
                body["field"] = exc.field
            if exc.status == 400:
                raise ValidationError(body) from None
            return Response(body, status=exc.status)


class NodeTokenScheme(OpenApiAuthenticationExtension):
    """Documents ``Authorization: Node <token>`` in the OpenAPI schema."""

    target_class = NodeTokenAuthentication
    name = "nodeToken"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "header", "name": "Authorization",
                "description": "Node <token> (issued per node by a platform admin)"}


class NodeRegisterAPI(NodeAPIView):
    input_serializer = RegisterSerializer

    @extend_schema(request=RegisterSerializer, responses={200: dict}, tags=["node"])
    def post(self, request):
        result = self.call(node_services.node_register, node=request.user.node, report=self.parsed(request))
        return result if isinstance(result, Response) else Response(result)


class NodeHeartbeatAPI(NodeAPIView):
    input_serializer = HeartbeatSerializer

    @extend_schema(request=HeartbeatSerializer, responses={200: dict, 409: dict}, tags=["node"])
    def post(self, request):
        report = self.parsed(request)
        result = self.call(node_services.node_heartbeat, node=request.user.node, report=report,
                           reference=reference.of_request(request))
        if isinstance(result, Response):
            return result
        replica_health.replica_health_record(node=request.user.node, running=report.get("running") or [])
        return Response(result)


class NodeJobEventAPI(NodeAPIView):
    input_serializer = EventSerializer

    @extend_schema(request=EventSerializer, responses={200: dict, 404: dict, 409: dict}, tags=["node"])
    def post(self, request, job_id: int):
        result = self.call(node_event_apply, node=request.user.node, job_id=job_id, event=self.parsed(request))
        return result if isinstance(result, Response) else Response(result, status=status.HTTP_200_OK)


class NodeJobLogAPI(NodeAPIView):
    input_serializer = LogSerializer

    @extend_schema(request=LogSerializer, responses={200: dict, 404: dict, 409: dict}, tags=["node"])
    def post(self, request, job_id: int):
        data = self.parsed(request)
        result = self.call(node_jobs.node_job_log, node=request.user.node, job_id=job_id, **data)
        return result if isinstance(result, Response) else Response({"size": result})


# Each long-poll held in a web thread occupies it: at most this many per web process, so the rest keep serving.
# (Under the ASGI server the wait is held on its event loop instead, with a bound of its own: portal/longpoll.py.)
_WAITING_SLOTS = threading.BoundedSemaphore(settings.ROTA_NODE_WAITERS_PER_PROCESS)
# Put in the WSGI environ by the ASGI server (portal/longpoll.py): called with the node, the timeout and the
# delivery (a function of no argument to run in a web thread once there is news, or None), it holds the wait on
# the event loop after this view has answered, and replaces the answer's body with the wait's.
WAIT_ON_LOOP = "rota.node_wait_on_loop"


class NodeWaitAPI(NodeAPIView):
    """Long-poll for news: answers ``{"news": true, "waited": true}`` as soon as a cycle or a cancel changed
    this node's assignments, else ``{"news": false, "waited": true}`` after ``timeout_s`` (default and at most
    the node's heartbeat interval, ``node_cadence``). With news, a node that asked for ``assignments`` gets them
    in the same answer (``node_delivery``: ``as_of`` and ``assignments``, as its heartbeat would), else it sends
    its heartbeat, whose answer stays the truth.
    ``"waited": false`` (at once): this portal cannot hold the request now (no Redis, or every waiting slot
    of this web process is taken, or Redis failed); the node polls at its heartbeat interval instead."""

    input_serializer = WaitSerializer

    @extend_schema(request=WaitSerializer, responses={200: dict}, tags=["node"])
    def post(self, request):
        asked = self.parsed(request)
        timeout = wake.node_wait_timeout(asked.get("timeout_s"), node_cadence.heartbeat_interval_s())
        node = request.user.node
        deliver = (functools.partial(node_services.node_delivery, node=node, token_id=request.auth.pk)
                   if asked["assignments"] else None)
        wait_on_loop = request.META.get(WAIT_ON_LOOP)
        if wait_on_loop is not None:  # authenticated and valid: the ASGI server waits, without this thread
            wait_on_loop(node.pk, timeout, deliver)
            return Response(wake.node_wait_answer(None))
        if not wake.can_wait() or not _WAITING_SLOTS.acquire(blocking=False):
            return Response(wake.node_wait_answer(None))
        try:
            news = wake.node_wait(node.pk, timeout)
        finally:
            _WAITING_SLOTS.release()
        return Response(wake.node_wait_answer(news, deliver))
