"""``/api/v1/services/<team>/<service>/``: an inference service as a whole (its replicas, traffic and
autoscale), changing its replica count while it runs (``scale/``) and its autoscale (``autoscale/``). Members of
the team only; to anyone else the team does not exist (404), and a service the team does not have is 404 too."""

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from scheduler.selectors_services import service_of_member, service_summary
from scheduler.services import inference


class ScaleSerializer(serializers.Serializer):
    replicas = serializers.IntegerField(min_value=0, max_value=inference.MAX_REPLICAS)


class ScaledSerializer(serializers.Serializer):
    before = serializers.IntegerField()
    replicas = serializers.IntegerField()
    started = serializers.ListField(child=serializers.IntegerField())
    cancelled = serializers.ListField(child=serializers.IntegerField())


class AutoscaleSerializer(serializers.Serializer):
    enabled = serializers.BooleanField()
    min_replicas = serializers.IntegerField(min_value=1, max_value=inference.MAX_REPLICAS, default=1)
    max_replicas = serializers.IntegerField(min_value=1, max_value=inference.MAX_REPLICAS, default=1)
    target_rps = serializers.FloatField(min_value=0.001, max_value=inference.MAX_TARGET_RPS, default=10.0)
    scale_down_delay_s = serializers.IntegerField(min_value=0, max_value=inference.MAX_SCALE_DOWN_DELAY_S,
                                                  default=60)


def _call(fn, **kwargs):
    try:
        return fn(**kwargs)
    except DjangoValidationError as exc:
        raise ValidationError(exc.message_dict) from None


class ServiceDetailAPI(APIView):
    @extend_schema(responses=dict)
    def get(self, request, team: str, service: str):
        return Response(service_summary(service_of_member(request.user, team, service), service))


class ServiceScaleAPI(APIView):
    @extend_schema(request=ScaleSerializer, responses=ScaledSerializer)
    def post(self, request, team: str, service: str):
        found = service_of_member(request.user, team, service)
        data = ScaleSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        result = _call(inference.service_scale, user=request.user, team=found, service=service,
                       replicas=data.validated_data["replicas"])
        return Response(ScaledSerializer(result).data)


class ServiceAutoscaleAPI(APIView):
    @extend_schema(request=AutoscaleSerializer, responses=AutoscaleSerializer)
    def put(self, request, team: str, service: str):
        found = service_of_member(request.user, team, service)
        data = AutoscaleSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        row = _call(inference.service_autoscale_set, user=request.user, team=found, service=service,
                    **data.validated_data)
        return Response({"enabled": row.autoscale, "min_replicas": row.min_replicas,
                         "max_replicas": row.max_replicas, "target_rps": row.target_rps,
                         "scale_down_delay_s": row.scale_down_delay_s})
