"""``GET /api/v1/teams/`` (teams you may see) and ``GET|PUT /api/v1/quotas/`` (PUT: platform admins,
the same validation, optimistic concurrency and audit as the quota page)."""

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.access import is_platform_admin, teams_for
from portal.governance import services
from scheduler.models import Quota


class TeamSerializer(serializers.Serializer):
    name = serializers.CharField()
    display_name = serializers.CharField()
    parent = serializers.CharField(source="parent.name", default=None)


class QuotaSerializer(serializers.ModelSerializer):
    team = serializers.CharField(source="team.name")
    gpu_model = serializers.CharField(source="gpu_model.name")
    pool = serializers.CharField(source="pool.name", default=None)

    class Meta:
        model = Quota
        fields = ["team", "gpu_model", "pool", "guaranteed", "limit", "weight", "non_lendable", "updated_at"]


class QuotaInputSerializer(serializers.Serializer):
    team = serializers.CharField(max_length=63)
    gpu_model = serializers.CharField(max_length=63)
    guaranteed = serializers.DecimalField(max_digits=9, decimal_places=3, min_value=0)
    limit = serializers.DecimalField(max_digits=9, decimal_places=3, min_value=0, allow_null=True, required=False,
                                     default=None)
    weight = serializers.DecimalField(max_digits=7, decimal_places=3, default=1)
    updated_at = serializers.DateTimeField(required=False, allow_null=True, default=None,
                                           help_text="the row's updated_at as you read it (omit for a new quota)")


class QuotaPutSerializer(serializers.Serializer):
    quotas = QuotaInputSerializer(many=True, allow_empty=False)
    reason = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class TeamListAPI(APIView):
    """The teams you may see: yours, or all for platform admins."""

    @extend_schema(responses=TeamSerializer(many=True))
    def get(self, request):
        teams = teams_for(request.user).select_related("parent").order_by("name")
        return Response(TeamSerializer(teams, many=True).data)


class QuotaAPI(APIView):
    """Quotas of the teams you may see. PUT (platform admins) applies a set of cells all or nothing."""

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
        changes = [services.QuotaChange(**item) for item in data.validated_data["quotas"]]
        try:
            services.quota_matrix_set(user=request.user, changes=changes, reason=data.validated_data["reason"])
        except services.StaleEdit as exc:
            return Response({"detail": str(exc), "errors": {"updated_at": [str(exc)]}, "cells": exc.cells},
                            status=status.HTTP_409_CONFLICT)
        except DjangoValidationError as exc:
            raise ValidationError(exc.message_dict) from None
        return Response(self._list(request))
