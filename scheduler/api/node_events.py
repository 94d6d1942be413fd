"""``POST /api/v1/node/events/``: many job events of the calling node in one request (docs/node-protocol.md)."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from scheduler.api.node import MAX_BIGINT, EventSerializer, NodeAPIView
from scheduler.services.node_events import MAX_EVENTS, node_job_events


class BatchEventSerializer(EventSerializer):
    job_id = serializers.IntegerField(min_value=1, max_value=MAX_BIGINT)


class BatchSerializer(serializers.Serializer):
    events = BatchEventSerializer(many=True, allow_empty=False, max_length=MAX_EVENTS)


class NodeJobEventsAPI(NodeAPIView):
    """Each event as ``POST /api/v1/node/jobs/{job_id}/events/`` takes it, in order, the batch in one transaction
    (``scheduler.services.node_event_batch``); answers 200 with one result per event (``{"job_id", "state"}``,
    or ``{"job_id", "status", "detail", "field"}`` for a refused one). A body that does not validate is a 400
    naming the field (``events``, with each event's errors)."""

    input_serializer = BatchSerializer

    @extend_schema(request=BatchSerializer, responses={200: dict}, tags=["node"])
    def post(self, request):
        results = node_job_events(node=request.user.node, events=self.parsed(request)["events"])
        return Response({"results": results})
