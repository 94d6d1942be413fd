"""``/api/v1/services/<team>/<service>/keys/``: list, create (the raw key is in the answer once) and revoke
the API keys that let callers through the gateway ``/serve/<team>/<service>/…``. Members of the team only, for
a service it has (an inference job of that name): anything else is 404."""

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from scheduler.selectors_services import service_of_member
from scheduler.services import service_keys as keys


class ServiceKeySerializer(serializers.Serializer):
    id = serializers.IntegerField()
    service = serializers.CharField()
    prefix = serializers.CharField()
    created_at = serializers.DateTimeField()
    revoked_at = serializers.DateTimeField(allow_null=True)


class NewServiceKeySerializer(ServiceKeySerializer):
    key = serializers.CharField(help_text="the raw key: shown only in this answer")


class ServiceKeyListAPI(APIView):
    @extend_schema(responses=ServiceKeySerializer(many=True))
    def get(self, request, team: str, service: str):
        found = service_of_member(request.user, team, service)
        return Response(ServiceKeySerializer(keys.service_keys(found, service), many=True).data)

    @extend_schema(request=None, responses={201: NewServiceKeySerializer})
    def post(self, request, team: str, service: str):
        found = service_of_member(request.user, team, service)
        try:
            key, raw = keys.service_key_create(user=request.user, team=found, service=service)
        except DjangoValidationError as exc:
            raise ValidationError(exc.message_dict) from None
        body = {**ServiceKeySerializer(key).data, "key": raw}
        return Response(body, status=status.HTTP_201_CREATED)


class ServiceKeyRevokeAPI(APIView):
    @extend_schema(request=None, responses=ServiceKeySerializer)
    def delete(self, request, team: str, service: str, key_id: int):
        found = service_of_member(request.user, team, service)
        key = keys.service_key_revoke(team=found, service=service, key_id=key_id)
        return Response(ServiceKeySerializer(key).data)
