"""Quota loans in the REST API: ``GET|POST /api/v1/quota-loans/``, ``GET /api/v1/quota-loans/{id}/`` and
``POST …/{id}/approve|decline|cancel/``. A loan is seen by the members of both its teams (platform admins:
all); anyone else gets 404, as for a missing one."""

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.access import teams_for
from scheduler.models import QuotaLoan
from scheduler.services import loans as loan_services
from scheduler.services.common import db_now


class LoanSerializer(serializers.ModelSerializer):
    lender = serializers.CharField(source="lender.name")
    borrower = serializers.CharField(source="borrower.name")
    gpu_model = serializers.CharField(source="gpu_model.name")
    requested_by = serializers.CharField(source="requested_by.username", default=None)
    decided_by = serializers.CharField(source="decided_by.username", default=None)
    status = serializers.SerializerMethodField(help_text="state, with an approved loan as scheduled/active/ended")

    class Meta:
        model = QuotaLoan
        fields = ["id", "lender", "borrower", "gpu_model", "gpus", "starts_at", "ends_at", "state", "status", "reason",
                  "requested_by", "requested_at", "decided_by", "decided_at", "decision_note"]

    def get_status(self, loan) -> str:
        return loan.status_at(self.context["now"])


class LoanInputSerializer(serializers.Serializer):
    borrower = serializers.CharField(max_length=63)
    lender = serializers.CharField(max_length=63)
    gpu_model = serializers.CharField(max_length=63)
    gpus = serializers.CharField(max_length=30)
    starts_at = serializers.DateTimeField(required=False, help_text="default: now")
    ends_at = serializers.DateTimeField()
    reason = serializers.CharField(max_length=500, allow_blank=True)


class NoteSerializer(serializers.Serializer):
    note = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


def _call(fn, **kwargs):
    try:
        return fn(**kwargs)
    except DjangoValidationError as exc:
        raise ValidationError(exc.message_dict) from None
    except DjangoPermissionDenied as exc:
        raise PermissionDenied(str(exc)) from None


class LoanListAPI(APIView):
    """The loans of your teams, lent and borrowed (newest window first); POST asks for one."""

    @extend_schema(responses=LoanSerializer(many=True))
    def get(self, request):
        loans = loan_services.loans_for(request.user)[:500]
        return Response(LoanSerializer(loans, many=True, context={"now": db_now()}).data)

    @extend_schema(request=LoanInputSerializer, responses={201: LoanSerializer})
    def post(self, request):
        data = LoanInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = dict(data.validated_data)
        borrower = teams_for(request.user).filter(name=values.pop("borrower")).first()
        if borrower is None:
            raise ValidationError({"borrower": "no team of yours has that name"})
        values.setdefault("starts_at", db_now())
        loan = _call(loan_services.loan_request, user=request.user, borrower=borrower, **values)
        return Response(LoanSerializer(loan, context={"now": db_now()}).data, status=status.HTTP_201_CREATED)


def _loan(request, loan_id: int) -> QuotaLoan:
    try:
        return loan_services.loan_for(request.user, loan_id)
    except QuotaLoan.DoesNotExist:
        raise Http404("No such loan") from None


class LoanDetailAPI(APIView):
    @extend_schema(responses=LoanSerializer)
    def get(self, request, loan_id: int):
        return Response(LoanSerializer(_loan(request, loan_id), context={"now": db_now()}).data)


class LoanDecisionAPI(APIView):
    """POST approve / decline (the lender's team-admins) or cancel (the borrower's), with an optional note."""

    action_name = ""
    actions = {"approve": loan_services.loan_approve, "decline": loan_services.loan_decline,
               "cancel": loan_services.loan_cancel}

    @extend_schema(request=NoteSerializer, responses=LoanSerializer)
    def post(self, request, loan_id: int):
        loan = _loan(request, loan_id)
        data = NoteSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        loan = _call(self.actions[self.action_name], user=request.user, loan=loan, note=data.validated_data["note"])
        return Response(LoanSerializer(loan, context={"now": db_now()}).data)
