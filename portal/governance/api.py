"""``GET /api/v1/teams/`` (teams you may see), ``GET|PUT /api/v1/quotas/`` (PUT: platform admins,
the same validation, optimistic concurrency and audit as the quota page), ``GET /api/v1/queue/`` and
``POST /api/v1/jobs/{id}/priority-class/`` (platform admins: the queue page's data and action)."""

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.access import is_platform_admin, job_for, teams_for
from portal.governance import selectors, services
from scheduler.models import PriorityClass, Quota


class TeamSerializer(serializers.Serializer):
    name = serializers.CharField()
    display_name = serializers.CharField()
    parent = serializers.CharField(source="parent.name", default=None, allow_null=True)


class QuotaSerializer(serializers.ModelSerializer):
    team = serializers.CharField(source="team.name")
    gpu_model = serializers.CharField(source="gpu_model.name")
    pool = serializers.CharField(source="pool.name", default=None, allow_null=True)

    class Meta:
        model = Quota
        fields = ["team", "gpu_model", "pool", "guaranteed", "limit", "weight", "non_lendable", "updated_at"]


@extend_schema_field({"oneOf": [{"type": "number"}, {"type": "string", "format": "decimal"}]})
class QuotaValueField(serializers.Field):
    """A quota value as the client sent it (a number or a decimal string). The quota service parses and
    range-checks it with the quota page's rules, so one answer names every bad cell."""

    def to_internal_value(self, data):
        return data

    def to_representation(self, value):
        return value


class QuotaInputSerializer(serializers.Serializer):
    team = serializers.CharField(max_length=63)
    gpu_model = serializers.CharField(max_length=63)
    guaranteed = QuotaValueField(help_text=f"GPUs, 0 to {services.MAX_GPUS}, at most 3 decimals")
    limit = QuotaValueField(allow_null=True, required=False, default=None,
                            help_text=f"GPUs, 0 to {services.MAX_GPUS}, at most 3 decimals; null: no cap")
    weight = QuotaValueField(required=False, default=1,
                             help_text=f"above 0 and below {services.MAX_WEIGHT}, at most 3 decimals")
    updated_at = serializers.DateTimeField(required=False, allow_null=True, default=None,
                                           help_text="the row's updated_at as you read it (omit for a new quota)")
    pool = serializers.CharField(required=False, allow_null=True, default=None,
                                 help_text="null or omitted: the matrix holds the quotas that apply in every pool")

    def validate_pool(self, value):
        # Ignoring it would write a per-pool row's values (as listed by GET) onto the every-pool quota.
        if value is not None:
            raise serializers.ValidationError("only quotas for every pool (pool null) are edited here")
        return value


class QuotaPutSerializer(serializers.Serializer):
    quotas = QuotaInputSerializer(many=True, allow_empty=False)
    reason = serializers.CharField(max_length=500, required=False, allow_blank=True, default="",
                                   help_text="required (not blank): why, kept in the audit log")


class TeamListAPI(APIView):
    """The teams you may see: yours, or all for platform admins."""

    @extend_schema(responses=TeamSerializer(many=True))
    def get(self, request):
        teams = teams_for(request.user).select_related("parent").order_by("name")
        return Response(TeamSerializer(teams, many=True).data)


class QuotaAPI(APIView):
    """Quotas of the teams you may see. PUT (platform admins) applies a set of cells, each at most once, all or
    nothing."""

    def _list(self, request):
        qs = Quota.objects.filter(team__in=teams_for(request.user)).select_related("team", "gpu_model", "pool")
        return QuotaSerializer(qs.order_by("team__name", "gpu_model__name"), many=True).data

    @extend_schema(responses=QuotaSerializer(many=True))
    def get(self, request):
        return Response(self._list(request))

    @extend_schema(request=QuotaPutSerializer, responses={200: QuotaSerializer(many=True), 409: dict})
    def put(self, request):
        if not is_platform_admin(request.user):
            raise PermissionDenied("only platform admins may change quotas")
        data = QuotaPutSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        reason = data.validated_data["reason"]
        changes, errors = services.quota_changes_parse(data.validated_data["quotas"])
        errors |= services.reason_errors(reason)
        if errors:
            raise ValidationError({key: [message] for key, message in errors.items()})
        try:
            services.quota_matrix_set(user=request.user, changes=changes, reason=reason)
        except services.StaleEdit as exc:
            return Response({"detail": str(exc), "errors": {"updated_at": [str(exc)]}, "cells": exc.cells},
                            status=status.HTTP_409_CONFLICT)
        except DjangoValidationError as exc:
            raise ValidationError(exc.message_dict) from None
        return Response(self._list(request))


class QueueJobSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="pk")
    name = serializers.CharField()
    team = serializers.CharField(source="team.name")
    submitted_by = serializers.CharField(source="submitted_by.username")
    kind = serializers.CharField()
    gpus = serializers.IntegerField()
    gpu_fraction = serializers.DecimalField(max_digits=4, decimal_places=3, allow_null=True)
    gpu_model = serializers.CharField(source="gpu_model.name", default=None, allow_null=True)
    priority_class = serializers.CharField(source="priority_class.name")
    state = serializers.CharField()
    queue_position = serializers.IntegerField(allow_null=True)
    pending_reason_code = serializers.CharField()
    pending_reason_message = serializers.CharField()
    estimated_start = serializers.DateTimeField(allow_null=True)


class PoolQueueSerializer(serializers.Serializer):
    pool = serializers.CharField(source="name")
    gpu_models = serializers.ListField(child=serializers.CharField())
    teams = serializers.ListField(child=serializers.CharField())
    total = serializers.IntegerField(help_text="waiting jobs this pool could serve (jobs lists the head)")
    jobs = QueueJobSerializer(many=True)


class QueueAPI(APIView):
    """Platform admins: pending and held jobs per pool in the engine's order (``?pool=`` for one pool)."""

    @extend_schema(responses=PoolQueueSerializer(many=True))
    def get(self, request):
        if not is_platform_admin(request.user):
            raise PermissionDenied("only platform admins see the global queue")
        return Response(PoolQueueSerializer(selectors.queue_by_pool(pool=request.query_params.get("pool", "")),
                                            many=True).data)


class JobPriorityInputSerializer(serializers.Serializer):
    priority_class = serializers.SlugRelatedField(slug_field="name", queryset=PriorityClass.objects.all())
    # Required: the service checks it together with the job's state, so one answer names every problem.
    reason = serializers.CharField(max_length=500, required=False, allow_blank=True, default="",
                                   help_text="required (not blank): why, kept in the audit log")


class JobPriorityAPI(APIView):
    """Platform admins: move a pending or held job to another priority class (audited)."""

    @extend_schema(request=JobPriorityInputSerializer, responses=QueueJobSerializer)
    def post(self, request, job_id: int):
        if not is_platform_admin(request.user):
            raise PermissionDenied("only platform admins change a job's priority class")
        job = job_for(request.user, job_id)
        data = JobPriorityInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            job = services.job_priority_class_set(user=request.user, job=job, **data.validated_data)
        except DjangoValidationError as exc:
            raise ValidationError(exc.message_dict) from None
        return Response(QueueJobSerializer(job).data)
