"""The node API (docs/node-protocol.md): a node authenticates with its own token and reports only about
itself and its own allocations. Nodes cannot reach user endpoints and users cannot reach these."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed, ValidationError
from rest_framework.permissions import BasePermission
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle
from rest_framework.views import APIView

from scheduler.models import NodeToken
from scheduler.models.cluster import hash_token
from scheduler.services import nodes as node_services

MAX_GPUS_PER_NODE = 64
MAX_TELEMETRY = 2000
MAX_LOG_CHUNK = 1024 * 1024


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


class NodeTokenAuthentication(BaseAuthentication):
    """``Authorization: Node <token>``; only hashes are stored; revoked tokens fail."""

    keyword = b"node"

    def authenticate(self, request):
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != self.keyword:
            return None
        if len(parts) != 2:
            raise AuthenticationFailed("Authorization must be 'Node <token>'")
        token = (
            NodeToken.objects.select_related("node", "node__pool")
            .filter(token_hash=hash_token(parts[1].decode(errors="replace")), revoked_at__isnull=True)
            .first()
        )
        if token is None:
            raise AuthenticationFailed("unknown or revoked node token")
        return NodePrincipal(token.node), token

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


class RegisterSerializer(serializers.Serializer):
    hostname = serializers.CharField(max_length=255, required=False, allow_blank=True)
    agent_version = serializers.CharField(max_length=40, required=False, allow_blank=True, default="")
    gpu_backend = serializers.CharField(max_length=20, required=False, allow_blank=True, default="")
    driver_version = serializers.CharField(max_length=40, required=False, allow_blank=True, default="")
    cuda_version = serializers.CharField(max_length=20, required=False, allow_blank=True, default="")
    cpus = serializers.IntegerField(min_value=0, max_value=100_000, default=0)
    memory_mb = serializers.IntegerField(min_value=0, max_value=10**12, default=0)
    gpus = GpuReportSerializer(many=True, max_length=MAX_GPUS_PER_NODE)

    def validate_gpus(self, gpus):
        indexes = [g["index"] for g in gpus]
        uuids = [g["uuid"] for g in gpus]
        if len(set(indexes)) != len(indexes) or len(set(uuids)) != len(uuids):
            raise serializers.ValidationError("GPU indexes and UUIDs must be unique")
        return gpus


class RunningSerializer(serializers.Serializer):
    job_id = serializers.IntegerField(min_value=1)
    attempt = serializers.IntegerField(min_value=1)
    pid = serializers.IntegerField(min_value=0, required=False, allow_null=True)
    state = serializers.CharField(max_length=20, required=False)


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
    ecc_uncorrected = serializers.IntegerField(min_value=0, required=False, allow_null=True)
    xid = serializers.IntegerField(min_value=0, max_value=100_000, required=False, allow_null=True)


class HeartbeatSerializer(serializers.Serializer):
    seq = serializers.IntegerField(min_value=1, max_value=2**62)
    running = RunningSerializer(many=True, required=False, max_length=1024)
    gpus = GpuHealthSerializer(many=True, required=False, max_length=MAX_GPUS_PER_NODE)
    telemetry = TelemetrySerializer(many=True, required=False, max_length=MAX_TELEMETRY)


class EventSerializer(serializers.Serializer):
    attempt = serializers.IntegerField(min_value=1)
    type = serializers.ChoiceField(choices=["started", "exited", "stopped", "start_failed"])
    pid = serializers.IntegerField(required=False, allow_null=True)
    exit_code = serializers.IntegerField(required=False, allow_null=True, min_value=-255, max_value=255)
    signal = serializers.IntegerField(required=False, allow_null=True, min_value=0, max_value=128)
    message = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")
    at = serializers.CharField(max_length=40, required=False, allow_blank=True)


class LogSerializer(serializers.Serializer):
    attempt = serializers.IntegerField(min_value=1)
    offset = serializers.IntegerField(min_value=0)
    data = serializers.CharField(max_length=MAX_LOG_CHUNK, allow_blank=True, trim_whitespace=False)


class NodeAPIView(APIView):
    authentication_classes = [NodeTokenAuthentication]
    permission_classes = [IsNode]
    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "node"
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
        result = self.call(node_services.node_heartbeat, node=request.user.node, report=self.parsed(request))
        return result if isinstance(result, Response) else Response(result)


class NodeJobEventAPI(NodeAPIView):
    input_serializer = EventSerializer

    @extend_schema(request=EventSerializer, responses={200: dict, 404: dict, 409: dict}, tags=["node"])
    def post(self, request, job_id: int):
        result = self.call(node_services.node_job_event, node=request.user.node, job_id=job_id,
                           event=self.parsed(request))
        if isinstance(result, Response):
            return result
        return Response({"job_id": result.pk, "state": result.state}, status=status.HTTP_200_OK)


class NodeJobLogAPI(NodeAPIView):
    input_serializer = LogSerializer

    @extend_schema(request=LogSerializer, responses={200: dict, 404: dict, 409: dict}, tags=["node"])
    def post(self, request, job_id: int):
        data = self.parsed(request)
        result = self.call(node_services.node_job_log, node=request.user.node, job_id=job_id, **data)
        return result if isinstance(result, Response) else Response({"size": result})
