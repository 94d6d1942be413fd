"""The accounting REST API: usage JSON and chargeback exports. Thin: parse, call report builders, render."""

from datetime import date

from django.http import HttpResponse, StreamingHttpResponse
from drf_spectacular.utils import OpenApiParameter, OpenApiTypes, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.response import Response
from rest_framework.views import APIView

from accounting import charts, exports, periods
from accounting.loans import loan_lines
from accounting.reports import idle_for, rated_usage, usage_summary
from accounting.selectors import team_for
from accounting.selectors_credits import credits_for
from accounting.selectors_fairness import fairness_for, visible_team_names
from portal.access import cost_teams_for
from scheduler.services.common import db_now

FORMATS = ("csv", "xlsx", "pdf")
AGGREGATIONS = ("hour", *periods.AGGREGATIONS)  # the API also sums by hour
XLSX_TYPE = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"


class IgnoreFormatParam(DefaultContentNegotiation):
    """``?format=`` chooses the export file type here, not DRF's renderer."""

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


class ChargebackAPI(APIView):
    """The chargeback for one month as CSV (streamed), XLSX or a PDF statement per team. You get only the
    rows of teams you belong to (platform admins: all teams); ``team`` narrows to one of them."""

    content_negotiation_class = IgnoreFormatParam

    @extend_schema(
        parameters=[
            OpenApiParameter("month", str, required=True, description="YYYY-MM"),
            OpenApiParameter("format", str, enum=list(FORMATS)),
            OpenApiParameter("team", str),
        ],
        responses={(200, "text/csv"): OpenApiTypes.BINARY},
    )
    def get(self, request):
        try:
            month = periods.parse_month(request.query_params.get("month"))
        except ValueError as exc:
            raise ValidationError({"month": [str(exc)]}) from None
        fmt = request.query_params.get("format", "csv")
        if fmt not in FORMATS:
            raise ValidationError({"format": [f"must be one of {', '.join(FORMATS)}; got {fmt!r}"]})
        team_name = request.query_params.get("team")
        team = team_for(request.user, team_name) if team_name else None
        rated = rated_usage(request.user, month, agg="month", team=team)
        period = month.start.strftime("%Y-%m")
        stem = f"rota-chargeback-{period}" + (f"-{team.name}" if team else "")
        visible = {team.name} if team else visible_team_names(request.user)
        now = db_now()
        idle = idle_for(month, now=now, agg="month", visible=visible, cards=rated.cards)
        credits = credits_for(request.user, start=month.start, end=month.end, cards=rated.cards, team=team)
        if fmt == "csv":
            response = StreamingHttpResponse(exports.csv_rows(rated.lines, period, idle, credits),
                                             content_type="text/csv")
            response["Content-Disposition"] = f'attachment; filename="{stem}.{fmt}"'
            return response
        fairness = fairness_for(visible, start=month.start, end=month.end, now=now)
        loans = loan_lines(visible, start=month.start, end=month.end)
        if fmt == "xlsx":
            content = exports.xlsx_bytes(rated.lines, period, rated.cards, idle, fairness, loans, credits)
            response = HttpResponse(content, content_type=XLSX_TYPE)
        else:
            teams = (
                [team.name]
                if team
                else sorted({r.usage.team for r in rated.lines} | {c.team for c in credits})
                or list(cost_teams_for(request.user).values_list("name", flat=True)[:50])
            )
            content = exports.pdf_bytes(rated.lines, month.label, teams, idle, fairness, loans, credits)
            response = HttpResponse(content, content_type="application/pdf")
        response["Content-Disposition"] = f'attachment; filename="{stem}.{fmt}"'
        return response


class UsageRowSerializer(serializers.Serializer):
    period = serializers.DateTimeField()
    group = serializers.CharField(help_text="the value of the group_by field (a team name, a user name, ...)")
    gpu_seconds = serializers.DecimalField(max_digits=24, decimal_places=3)
    gpu_hours = serializers.DecimalField(max_digits=20, decimal_places=4)
    cost = serializers.DecimalField(max_digits=16, decimal_places=2)


class UsageOutputSerializer(serializers.Serializer):
    start = serializers.DateTimeField()
    end = serializers.DateTimeField(help_text="exclusive")
    group_by = serializers.CharField()
    agg = serializers.CharField()
    currency = serializers.CharField()
    total_gpu_hours = serializers.DecimalField(max_digits=20, decimal_places=4)
    total_cost = serializers.DecimalField(max_digits=16, decimal_places=2)
    results = UsageRowSerializer(many=True)


class UsageAPI(APIView):
    """GPU-seconds, GPU-hours and cost per period and group for ``[start, end]`` (inclusive days, UTC)."""

    @extend_schema(
        responses=UsageOutputSerializer,
        parameters=[
            OpenApiParameter("start", str, required=True, description="YYYY-MM-DD"),
            OpenApiParameter("end", str, required=True, description="YYYY-MM-DD, inclusive"),
            OpenApiParameter("group_by", str, enum=list(charts.GROUP_BYS)),
            OpenApiParameter("agg", str, enum=list(AGGREGATIONS)),
            OpenApiParameter("team", str),
        ],
    )
    def get(self, request):
        q = request.query_params
        errors = {}
        group_by, agg = q.get("group_by", "team"), q.get("agg", "day")
        if group_by not in charts.GROUP_BYS:
            errors["group_by"] = [f"must be one of {', '.join(charts.GROUP_BYS)}; got {group_by!r}"]
        if agg not in AGGREGATIONS:
            errors["agg"] = [f"must be one of {', '.join(AGGREGATIONS)}; got {agg!r}"]
        rng = None
        for name in ("start", "end"):
            try:
                periods.parse_day(q.get(name))
            except ValueError as exc:
                errors[name] = [str(exc)]
        if not errors:
            try:
                rng = periods.preset_range("custom", date.today(), q["start"], q["end"])
            except ValueError as exc:
                errors["end"] = [str(exc)]
        if errors:
            raise ValidationError(errors)
        team = team_for(request.user, q["team"]) if q.get("team") else None
        rated = rated_usage(request.user, rng, agg=agg, team=team)
        return Response(
            {
                "start": rng.start.isoformat(),
                "end": rng.end.isoformat(),
                "group_by": group_by,
                "agg": agg,
                "currency": rated.currency,
                "total_gpu_hours": f"{rated.total_gpu_hours:.4f}",
                "total_cost": f"{rated.total_cost:.2f}",
                "results": usage_summary(rated, group_by),
            }
        )


class FairnessLineSerializer(serializers.Serializer):
    gpu_model = serializers.CharField()
    capacity = serializers.FloatField(help_text="GPUs of this model in the inventory, on average over `hours`")
    guaranteed = serializers.FloatField(help_text="GPUs guaranteed (scaled to the capacity), on average over `hours`")
    weight = serializers.FloatField()
    entitled_gpus = serializers.FloatField(help_text="on average over `hours`")
    entitled_gpu_hours = serializers.FloatField()
    received_gpu_hours = serializers.FloatField()
    received_ratio = serializers.FloatField(allow_null=True)
    hours = serializers.FloatField(help_text="hours of the period during which the model had GPUs")
    lost_gpu_hours = serializers.FloatField(help_text="of the received, the work preemption lost (since the "
                                                      "victims' last checkpoints), credited back to the team")


class TeamFairnessSerializer(serializers.Serializer):
    team = serializers.CharField()
    hours = serializers.FloatField(help_text="hours of the period counted (up to now for a running period)")
    guaranteed = serializers.FloatField(help_text="GPUs guaranteed, every model together (the lines' sum)")
    entitled_gpu_hours = serializers.FloatField()
    received_gpu_hours = serializers.FloatField()
    received_ratio = serializers.FloatField(allow_null=True)
    waiting_hours = serializers.FloatField(help_text="hours with at least one job pending or held")
    below_hours = serializers.FloatField(help_text="of those, hours while holding less than the guarantee")
    shortfall_gpu_hours = serializers.FloatField()
    lost_gpu_hours = serializers.FloatField(help_text="work lost to preemption, credited (the lines' sum)")
    lines = FairnessLineSerializer(many=True)


class FairnessOutputSerializer(serializers.Serializer):
    start = serializers.DateTimeField()
    end = serializers.DateTimeField(help_text="exclusive")
    results = TeamFairnessSerializer(many=True)


def parse_range(q) -> periods.Range:
    """``month=YYYY-MM`` or ``start`` and ``end`` (inclusive days); ValidationError naming the bad field."""
    if q.get("month"):
        try:
            return periods.parse_month(q["month"])
        except ValueError as exc:
            raise ValidationError({"month": [str(exc)]}) from None
    errors = {}
    for name in ("start", "end"):
        try:
            periods.parse_day(q.get(name))
        except ValueError as exc:
            errors[name] = [f"{exc} (or pass month=YYYY-MM)"]
    if errors:
        raise ValidationError(errors)
    try:
        return periods.preset_range("custom", date.today(), q["start"], q["end"])
    except ValueError as exc:
        raise ValidationError({"end": [str(exc)]}) from None


class FairnessAPI(APIView):
    """Fairness statement per team for a month or a range: entitled vs received GPU-hours per GPU model, and
    the time spent waiting below the guarantee (method: ``accounting.fairness``). Only your teams' rows."""

    @extend_schema(
        responses=FairnessOutputSerializer,
        parameters=[
            OpenApiParameter("month", str, description="YYYY-MM (or start and end)"),
            OpenApiParameter("start", str, description="YYYY-MM-DD"),
            OpenApiParameter("end", str, description="YYYY-MM-DD, inclusive"),
            OpenApiParameter("team", str),
        ],
    )
    def get(self, request):
        rng = parse_range(request.query_params)
        visible = visible_team_names(request.user)
        if request.query_params.get("team"):
            visible = {team_for(request.user, request.query_params["team"]).name}
        rows = fairness_for(visible, start=rng.start, end=rng.end, now=db_now())
        return Response(
            {
                "start": rng.start.isoformat(),
                "end": rng.end.isoformat(),
                "results": TeamFairnessSerializer(rows, many=True).data,
            }
        )
