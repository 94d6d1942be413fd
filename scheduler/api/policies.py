"""``GET /api/v1/policies/active/`` (anyone signed in: the policy the live cycle schedules with) and, for
platform admins, ``GET /api/v1/policies/`` and ``GET /api/v1/policies/{name}/`` (every policy with its versions
and activations). Read-only: policies are changed under Govern -> Policies, where every change is audited."""

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.permissions import IsAdminUser
from rest_framework.response import Response
from rest_framework.views import APIView

from scheduler.models import PolicyActivation, SchedulingPolicy
from scheduler.models.policies import ORDERINGS, PLACEMENTS, PREEMPTION_SCOPES
from scheduler.selectors_policies import policy_active, policy_list


class KnobsSerializer(serializers.Serializer):
    """The knobs of a version (the engine's policy)."""

    ordering = serializers.ChoiceField(choices=ORDERINGS)
    backfill = serializers.BooleanField()
    preemption = serializers.BooleanField()
    borrowing = serializers.BooleanField()
    placement = serializers.ChoiceField(choices=PLACEMENTS)
    fair_share_half_life_s = serializers.FloatField()
    guarantee_first = serializers.BooleanField()
    las_thresholds_gpu_s = serializers.ListField(child=serializers.FloatField())
    preemption_scope = serializers.ChoiceField(choices=PREEMPTION_SCOPES)
    reclaim = serializers.BooleanField()


class ActivationSerializer(serializers.Serializer):
    at = serializers.DateTimeField()
    actor = serializers.CharField(source="actor.username", default=None, allow_null=True)
    reason = serializers.CharField()


class VersionSerializer(KnobsSerializer):
    number = serializers.IntegerField()
    label = serializers.CharField(help_text="policy name and version, as decisions and what-if replays name it")
    created_at = serializers.DateTimeField()
    created_by = serializers.CharField(source="created_by.username", default=None, allow_null=True)
    reason = serializers.CharField()
    activations = ActivationSerializer(many=True, source="activations.all",
                                       help_text="when this version was made the live cycle's policy")


class PolicySerializer(serializers.Serializer):
    name = serializers.CharField(source="policy.name")
    description = serializers.CharField(source="policy.description")
    active = serializers.BooleanField(help_text="true: one of its versions schedules the live cycle")
    active_version = serializers.SerializerMethodField()
    current_version = serializers.IntegerField(source="current.number", help_text="its newest version")
    versions = VersionSerializer(many=True, help_text="newest first")

    def get_active_version(self, row) -> int | None:
        version = self.context["active"].version
        return version.number if row.active and version is not None else None


class ActivePolicySerializer(KnobsSerializer):
    name = serializers.CharField(allow_null=True, help_text="null: no stored policy, the built-in default")
    version = serializers.IntegerField(allow_null=True)
    label = serializers.CharField()
    since = serializers.DateTimeField(allow_null=True, help_text="when this version was activated")


class ActivePolicyAPI(APIView):
    """The scheduling policy the live cycle uses now (every signed-in user may read it)."""

    @extend_schema(responses=ActivePolicySerializer)
    def get(self, request):
        active = policy_active()
        version = active.version
        since = (PolicyActivation.objects.filter(version=version).order_by("-at").values_list("at", flat=True)
                 .first() if version is not None else None)
        knobs = {k: getattr(active.policy, k) for k in KnobsSerializer().fields}
        data = {**knobs, "las_thresholds_gpu_s": list(knobs["las_thresholds_gpu_s"]), "label": active.label,
                "name": version.policy.name if version else None, "version": version.number if version else None,
                "since": since}
        return Response(ActivePolicySerializer(data).data)


class PolicyListAPI(APIView):
    """Every scheduling policy with its versions (platform admins)."""

    permission_classes = [IsAdminUser]

    @extend_schema(responses=PolicySerializer(many=True))
    def get(self, request):
        return Response(PolicySerializer(policy_list(), many=True, context={"active": policy_active()}).data)


class PolicyDetailAPI(APIView):
    """One scheduling policy with its versions and their activations (platform admins)."""

    permission_classes = [IsAdminUser]

    @extend_schema(responses=PolicySerializer)
    def get(self, request, name: str):
        policy = get_object_or_404(SchedulingPolicy, name=name)
        row = next(r for r in policy_list() if r.policy.pk == policy.pk)
        return Response(PolicySerializer(row, context={"active": policy_active()}).data)
