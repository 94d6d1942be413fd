"""The notifications API: your preferences (GET / PUT) and what you were told, with each delivery. Only ever
the caller's own."""

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from notifications.models import EVENTS, Delivery, Notification, NotificationPreference
from notifications.services import (
    MAX_PENDING_MINUTES,
    MAX_WEBHOOK_URL,
    MIN_PENDING_MINUTES,
    preference_for,
    preference_save,
)
from portal.api import Pagination


class PreferenceSerializer(serializers.Serializer):
    events = serializers.ListField(child=serializers.ChoiceField(choices=list(EVENTS)), max_length=len(EVENTS))
    scope = serializers.ChoiceField(choices=[s for s, _label in NotificationPreference.SCOPES])
    pending_minutes = serializers.IntegerField(min_value=MIN_PENDING_MINUTES, max_value=MAX_PENDING_MINUTES,
                                               default=60, help_text="for job-pending-long")
    email_enabled = serializers.BooleanField()
    webhook_url = serializers.CharField(max_length=MAX_WEBHOOK_URL, allow_blank=True)
    new_webhook_secret = serializers.BooleanField(default=False, write_only=True)
    webhook_secret = serializers.CharField(read_only=True, help_text="signs webhook messages (X-Rota-Signature)")


class DeliverySerializer(serializers.ModelSerializer):
    class Meta:
        model = Delivery
        fields = ["channel", "target", "state", "tries", "last_error", "response_status", "sent_at"]


class NotificationSerializer(serializers.ModelSerializer):
    deliveries = DeliverySerializer(many=True, read_only=True)

    class Meta:
        model = Notification
        fields = ["id", "event", "job", "job_array", "message", "created_at", "deliveries"]


class PreferenceAPI(APIView):
    """Your notification preferences: which events, about whose jobs, by e-mail and/or a signed webhook."""

    @extend_schema(responses=PreferenceSerializer)
    def get(self, request):
        return Response(PreferenceSerializer(preference_for(request.user)).data)

    @extend_schema(request=PreferenceSerializer, responses=PreferenceSerializer)
    def put(self, request):
        data = PreferenceSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            pref = preference_save(user=request.user, **data.validated_data)
        except DjangoValidationError as exc:
            raise ValidationError(exc.message_dict) from None
        return Response(PreferenceSerializer(pref).data)


class NotificationListAPI(APIView):
    """What you were told, newest first, with how each delivery went."""

    pagination_class = Pagination

    @extend_schema(responses=NotificationSerializer(many=True))
    def get(self, request):
        qs = request.user.notifications.prefetch_related("deliveries").order_by("-id")
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(qs, request, view=self)
        return paginator.get_paginated_response(NotificationSerializer(page, many=True).data)
