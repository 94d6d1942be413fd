"""The team endpoints: ``GET /api/v1/teams/{name}/share/`` (fair-share standing like ``sshare`` and quota
per GPU model), ``…/members/`` (team-admins) and ``…/templates/`` (members list, team-admins save and
delete). Outsiders get 404 everywhere, as on the pages; members get 403 where only team-admins may act."""

from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.models import Membership
from portal.teams import selectors, services
from scheduler.forms import TEMPLATE_FIELDS
from scheduler.kinds import KIND_CHOICES
from scheduler.services.common import db_now


class ShareRowSerializer(serializers.Serializer):
    team = serializers.CharField()
    entitlement = serializers.FloatField(help_text="GPUs: the sum of guarantees, else of quota weights")
    norm_shares = serializers.FloatField(help_text="entitlement / all teams' entitlements")
    raw_usage = serializers.FloatField(help_text="decayed GPU-seconds")
    norm_usage = serializers.FloatField(help_text="raw_usage / all teams' decayed usage")
    usage_per_entitlement = serializers.FloatField(help_text="the engine's ordering key; lower runs first")
    fair_share = serializers.FloatField(help_text="2 ** (-norm_usage / norm_shares): 1 unused, 0.5 on target")
    rank = serializers.IntegerField(help_text="1 runs first among teams of equal priority")


class QuotaStandingSerializer(serializers.Serializer):
    gpu_model = serializers.CharField()
    guaranteed = serializers.DecimalField(max_digits=9, decimal_places=3)
    limit = serializers.DecimalField(max_digits=9, decimal_places=3, allow_null=True)
    in_use = serializers.DecimalField(max_digits=9, decimal_places=3)
    borrowed = serializers.DecimalField(max_digits=9, decimal_places=3)
    lent = serializers.DecimalField(max_digits=9, decimal_places=3)


class ShareSerializer(serializers.Serializer):
    share = ShareRowSerializer(source="standing.team")
    teams = serializers.IntegerField(source="standing.teams")
    half_life_s = serializers.FloatField(source="standing.half_life_s")
    total_usage = serializers.FloatField(source="standing.total_usage")
    total_entitlement = serializers.FloatField(source="standing.total_entitlement")
    quotas = QuotaStandingSerializer(many=True)


class TeamShareAPI(APIView):
    """A team's fair-share standing and quota per GPU model."""

    @extend_schema(responses=ShareSerializer)
    def get(self, request, name: str):
        team = selectors.team_for(request.user, name)
        data = {"standing": selectors.share_standing(team=team, now=db_now()),
                "quotas": selectors.quota_standing(team=team)}
        return Response(ShareSerializer(data).data)


def _manager_team(request, name: str):
    """The team if the caller manages it; its members get 403 (they know it exists), outsiders 404."""
    team = selectors.team_for(request.user, name)
    if not selectors.can_manage_team(request.user, team):
        raise PermissionDenied(f"only team-admins of {team.name} manage its members")
    return team


class MemberSerializer(serializers.Serializer):
    username = serializers.CharField(source="user.username", max_length=150)
    role = serializers.ChoiceField(choices=Membership.ROLE_CHOICES)
    created_at = serializers.DateTimeField(read_only=True)


class MemberInputSerializer(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    role = serializers.ChoiceField(choices=Membership.ROLE_CHOICES, default=Membership.MEMBER)
    reason = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class TeamMembersAPI(APIView):
    """Team-admins and platform admins: list members; POST adds one or changes a role (audited)."""

    @extend_schema(responses=MemberSerializer(many=True))
    def get(self, request, name: str):
        return Response(MemberSerializer(selectors.team_members(team=_manager_team(request, name)), many=True).data)

    @extend_schema(request=MemberInputSerializer, responses=MemberSerializer)
    def post(self, request, name: str):
        team = _manager_team(request, name)
        data = MemberInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            membership = services.membership_set(actor=request.user, team=team, **data.validated_data)
        except DjangoValidationError as exc:
            raise ValidationError(exc.message_dict) from None
        return Response(MemberSerializer(membership).data)


class TeamMemberAPI(APIView):
    """Team-admins and platform admins: DELETE removes a member (audited; never the last team-admin)."""

    @extend_schema(responses={204: None})
    def delete(self, request, name: str, username: str):
        team = _manager_team(request, name)
        try:
            services.membership_remove(actor=request.user, team=team, username=username)
        except DjangoValidationError as exc:
            raise ValidationError(exc.message_dict) from None
        return Response(status=204)


class TemplateSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="pk", read_only=True)
    name = serializers.CharField(max_length=100)
    kind = serializers.ChoiceField(choices=KIND_CHOICES)
    values = serializers.DictField(source="fields", help_text="submit-form values (name, command, gpus, …)")
    created_by = serializers.CharField(source="created_by.username", default=None, read_only=True)
    updated_at = serializers.DateTimeField(read_only=True)

    def validate_values(self, value):
        unknown = sorted(set(value) - set(TEMPLATE_FIELDS))
        if unknown:
            raise serializers.ValidationError(f"unknown fields {', '.join(unknown)}; allowed: "
                                              f"{', '.join(TEMPLATE_FIELDS)}")
        if any(isinstance(v, dict | list) for v in value.values()):
            raise serializers.ValidationError("values must be strings, numbers or booleans")
        return value


class TeamTemplatesAPI(APIView):
    """A team's saved job templates: members list them; team-admins POST one (same name: replaced)."""

    @extend_schema(responses=TemplateSerializer(many=True))
    def get(self, request, name: str):
        team = selectors.team_for(request.user, name)
        return Response(TemplateSerializer(selectors.job_templates(team=team), many=True).data)

    @extend_schema(request=TemplateSerializer, responses=TemplateSerializer)
    def post(self, request, name: str):
        team = selectors.team_for(request.user, name)
        data = TemplateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            template = services.job_template_save(user=request.user, team=team, **data.validated_data)
        except DjangoValidationError as exc:
            raise ValidationError({("name" if k == "template_name" else k): v
                                   for k, v in exc.message_dict.items()}) from None
        return Response(TemplateSerializer(template).data, status=201)


class TeamTemplateAPI(APIView):
    """DELETE a saved template (team-admins; members get 403, outsiders 404)."""

    @extend_schema(responses={204: None})
    def delete(self, request, name: str, template_id: int):
        team = selectors.team_for(request.user, name)
        template = selectors.job_template_for(request.user, template_id)
        if template.team_id != team.pk:
            raise Http404("No such template")
        services.job_template_delete(user=request.user, template=template)
        return Response(status=204)
