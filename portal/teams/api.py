"""``GET /api/v1/teams/{name}/share/``: a team's fair-share standing (like ``sshare``) and its quota
standing per GPU model. Members and platform admins; anyone else gets 404."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.teams import selectors
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
