"""The node API's one call for the Slurm bridge: Slurm's record of finished attempts, for the accounting
reconciliation (``scheduler/services/slurm_accounting.py``). Authenticated with the node's own token."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from scheduler.api.node import NodeAPIView
from scheduler.services.slurm_accounting import slurm_accounting_report

MAX_RECORDS = 500
TEN_YEARS_S = 10 * 365 * 86_400


class SlurmRecordSerializer(serializers.Serializer):
    job_id = serializers.IntegerField(min_value=1, max_value=2**62)
    attempt = serializers.IntegerField(min_value=1, max_value=1_000_000)
    slurm_job_id = serializers.IntegerField(min_value=1, max_value=2**62)
    state = serializers.CharField(max_length=30)
    started_at = serializers.DateTimeField(allow_null=True, required=False, default=None)
    ended_at = serializers.DateTimeField(allow_null=True, required=False, default=None)
    elapsed_s = serializers.FloatField(min_value=0, max_value=TEN_YEARS_S)
    gpus = serializers.IntegerField(min_value=0, max_value=1024, allow_null=True, required=False, default=None)


class SlurmAccountingSerializer(serializers.Serializer):
    records = SlurmRecordSerializer(many=True, max_length=MAX_RECORDS)


class NodeSlurmAccountingAPI(NodeAPIView):
    input_serializer = SlurmAccountingSerializer

    @extend_schema(request=SlurmAccountingSerializer, responses={200: dict}, tags=["node"])
    def post(self, request):
        data = self.parsed(request)
        return Response(slurm_accounting_report(node=request.user.node, records=data["records"]))
