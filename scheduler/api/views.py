"""The user-facing REST API for jobs, nodes and priority classes. Thin: parse, call a service, render."""

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Prefetch
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.exceptions import PermissionDenied, Throttled, ValidationError
from rest_framework.generics import ListAPIView
from rest_framework.permissions import IsAdminUser
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.access import array_for, arrays_for, job_for, jobs_for, submit_teams_for, teams_for
from portal.api import Pagination
from portal.throttle import QuoteThrottle
from scheduler.api.job_rows import JobAnswerPage
from scheduler.api.serializers import (
    JobArraySerializer,
    JobDetailSerializer,
    JobInputSerializer,
    JobSerializer,
    NodeSerializer,
    NodeStateInputSerializer,
    PriorityClassSerializer,
)
from scheduler.kinds import KINDS
from scheduler.models import Allocation, Gpu, Job, Node, Pool, PriorityClass
from scheduler.models.jobs import PREFETCHED_ALLOCATIONS, JobState
from scheduler.selectors import (
    STATE_RULE,
    array_state_counts,
    filter_state,
    nodes_matching,
    valid_state,
)
from scheduler.services import arrays as array_services
from scheduler.services import jobs as job_services
from scheduler.services import reference
from scheduler.services.nodes import NodeProtocolError, node_set_state


def _allocations_prefetch():
    # Into a list attribute: a prefetch into the related manager builds a queryset per job (0.8 of 1.3 s for a
    # 1,000-job page at scale).
    return Prefetch("allocations", queryset=Allocation.objects.select_related("node", "gpu", "gpu__model"),
                    to_attr=PREFETCHED_ALLOCATIONS)


def _service_call(fn, **kwargs):
    """Run a service; turn its errors into API errors that name the field."""
    try:
        return fn(**kwargs)
    except DjangoValidationError as exc:
        raise ValidationError(exc.message_dict if hasattr(exc, "error_dict") else {"detail": exc.messages}) from None
    except job_services.NotAllowed as exc:
        raise PermissionDenied(str(exc)) from None


class JobListCreateAPI(APIView):
    """List the jobs you may see (filter with ?state= (a state, or ``active`` / ``finished``), ?team=,
    ?kind=, ?array_id=) or submit a new one; with ``array`` the submission is a job array (201 with the
    array and its tasks' ids)."""

    pagination_class = Pagination  # also tells the schema the list is paginated

    @extend_schema(
        responses=JobSerializer(many=True),
        parameters=[OpenApiParameter("state", str), OpenApiParameter("team", str), OpenApiParameter("kind", str),
                    OpenApiParameter("array_id", int)],
    )
    def get(self, request):
        qs = jobs_for(request.user)
        params = request.query_params
        state, kind, team = params.get("state", ""), params.get("kind", ""), params.get("team", "")
        array_id = params.get("array_id", "")
        errors = {}  # every bad filter at once
        if array_id and not (array_id.isdigit() and arrays_for(request.user).filter(pk=int(array_id)).exists()):
            errors["array_id"] = [f"no array of yours has the id {array_id!r}"]
        if not valid_state(state):
            errors["state"] = [f"must be {STATE_RULE}"]
        if kind and kind not in KINDS:
            errors["kind"] = [f"must be one of {', '.join(KINDS)}; got {kind!r}"]
        # Another team's name gets the same answer as a missing one: names of other teams do not leak.
        if team and not teams_for(request.user).filter(name=team).exists():
            errors["team"] = [f"no team of yours is named {team!r}"]
        if errors:
            raise ValidationError(errors)
        qs = filter_state(qs, state)
        if kind:
            qs = qs.filter(kind=kind)
        if team:
            qs = qs.filter(team__name=team)
        if array_id:
            qs = qs.filter(array_id=int(array_id))
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(JobAnswerPage(qs, "-id"), request, view=self)
        return paginator.get_paginated_response(page)

    @extend_schema(request=JobInputSerializer, responses={201: JobSerializer})
    def post(self, request):
        data = JobInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = dict(data.validated_data)
        if values.get("array"):
            job_array = _service_call(array_services.array_submit, user=request.user, **values)
            return Response(_array_body(job_array, ids=list(job_array.tasks.order_by("array_index")
                                                            .values_list("pk", flat=True))),
                            status=status.HTTP_201_CREATED)
        values.pop("array", None)
        job = _service_call(job_services.job_submit, user=request.user, lookups=reference.of_request(request),
                            **values)
        # Rendered from the saved object, which holds its team, model and class already: a job just queued
        # holds no allocation, so reading it back (two queries, 5-10 ms under load) would add nothing.
        setattr(job, PREFETCHED_ALLOCATIONS, [])
        return Response(JobSerializer(job).data, status=status.HTTP_201_CREATED)


class JobQuoteAPI(APIView):
    """Quote a job before submitting it: would it start now (or when, and why), its hourly and maximum
    total cost at the current rate card, and the team's remaining quota. Nothing is saved. At most
    ``DEFAULT_THROTTLE_RATES["quote"]`` a person (429 past it)."""

    throttle_classes = [QuoteThrottle]

    def throttled(self, request, wait):
        """The form's words for the limit, with DRF's Retry-After."""
        raise Throttled(wait, detail=QuoteThrottle().refusal(wait))

    @extend_schema(request=JobInputSerializer, responses={200: dict})
    def post(self, request):
        from scheduler.services.quote import job_quote

        data = JobInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = dict(data.validated_data)
        if values.get("array"):  # a quote is of one task (with its dependencies); the array's spec is checked
            _service_call(array_services.array_spec_parse, text=values["array"])
        values.pop("array", None)
        result = _service_call(job_quote, user=request.user, **values)
        money = ("hourly_cost", "max_total_cost")  # money travels as decimal strings, never floats
        return Response({k: (str(v) if k in money and v is not None else v) for k, v in result.items()})


class JobDetailAPI(APIView):
    @extend_schema(responses=JobDetailSerializer)
    def get(self, request, job_id: int):
        job = job_for(request.user, job_id)
        job = Job.objects.prefetch_related(_allocations_prefetch(), "transitions__actor").select_related(
            "team", "submitted_by", "gpu_model", "priority_class", "pool").get(pk=job.pk)
        return Response(JobDetailSerializer(job).data)


class JobActionAPI(APIView):
    """POST cancel / hold / release."""

    action_name = ""
    actions = {
        "cancel": job_services.job_cancel,
        "hold": job_services.job_hold,
        "release": job_services.job_release,
    }

    @extend_schema(request=None, responses=JobSerializer)
    def post(self, request, job_id: int):
        job = job_for(request.user, job_id)
        job = _service_call(self.actions[self.action_name], user=request.user, job=job)
        job = jobs_for(request.user).prefetch_related(_allocations_prefetch()).get(pk=job.pk)
        return Response(JobSerializer(job).data)


class JobExplainAPI(APIView):
    """Why the job waits (the engine's reason now) and what would make it start: each change tried by
    running the engine on a copy of the cluster with it (``would_start_if``). Read-only, counted like a
    quote (it runs several scheduling cycles)."""

    throttle_classes = [QuoteThrottle]

    def throttled(self, request, wait):
        raise Throttled(wait, detail=QuoteThrottle().refusal(wait))

    @extend_schema(responses={200: dict})
    def get(self, request, job_id: int):
        from scheduler.services.explain import job_explain

        return Response(job_explain(job=job_for(request.user, job_id)))


class JobResubmitAPI(APIView):
    """Apply a change from ``explain``: the job is replaced by a copy with ``{"gpus": 12}`` (or ``gpu_model``,
    ``pool``, ``time_limit_minutes``); the answer is the new job."""

    @extend_schema(request=dict, responses={201: JobSerializer})
    def post(self, request, job_id: int):
        job = job_for(request.user, job_id)
        if not isinstance(request.data, dict):
            raise ValidationError({"changes": "must be an object such as {\"gpus\": 12}"})
        new = _service_call(job_services.job_resubmit, user=request.user, job=job, changes=dict(request.data))
        new = jobs_for(request.user).prefetch_related(_allocations_prefetch()).get(pk=new.pk)
        return Response(JobSerializer(new).data, status=status.HTTP_201_CREATED)


class JobLogsAPI(APIView):
    """The job's captured output. ?attempt= picks an attempt (default: the current one); ?offset= returns
    only what follows that byte offset (for following a running job)."""

    @extend_schema(
        parameters=[OpenApiParameter("attempt", int), OpenApiParameter("offset", int)],
        responses={200: dict},
    )
    def get(self, request, job_id: int):
        job = job_for(request.user, job_id)
        try:
            attempt = int(request.query_params.get("attempt", job.attempt))
            offset = int(request.query_params.get("offset", 0))
        except ValueError:
            raise ValidationError({"attempt": "attempt and offset must be integers"}) from None
        if offset < 0:
            raise ValidationError({"offset": "must be >= 0"})
        if not 1 <= attempt <= job.attempt:
            raise ValidationError({"attempt": f"must be between 1 and {job.attempt} (the job's attempts so far)"})
        entry = job.logs.filter(attempt=attempt).first()
        content = entry.content if entry else ""
        raw = content.encode()
        return Response({
            "job_id": job.pk, "attempt": attempt, "size": len(raw),
            "truncated": bool(entry and entry.truncated), "offset": offset,
            "content": raw[offset:].decode(errors="replace"), "finished": job.state not in (
                JobState.PENDING, JobState.HELD, JobState.ADMITTED, JobState.STARTING, JobState.RUNNING),
        })


def _array_body(job_array, **extra) -> dict:
    counts = array_state_counts([job_array.pk])
    return {"array_id": job_array.pk, **JobArraySerializer(job_array, context={"counts": counts}).data, **extra}


class JobArrayDetailAPI(APIView):
    """A job array and how many of its tasks are in each state (its tasks: ``/api/v1/jobs/?array_id=N``)."""

    @extend_schema(responses=JobArraySerializer)
    def get(self, request, array_id: int):
        return Response(_array_body(array_for(request.user, array_id)))


class JobArrayCancelAPI(APIView):
    """Cancel every task of the array that has not ended."""

    @extend_schema(request=None, responses=JobArraySerializer)
    def post(self, request, array_id: int):
        job_array = array_for(request.user, array_id)
        cancelled = _service_call(array_services.array_cancel, user=request.user, job_array=job_array)
        return Response(_array_body(job_array, cancelled=cancelled))


class NodeListAPI(APIView):
    """Nodes with their GPUs, by name, a page at a time (cluster capacity is not tenant-owned data): filter
    with ?pool=, ?state= and ?name= (part of the name)."""

    pagination_class = Pagination  # also tells the schema the list is paginated

    @extend_schema(
        responses=NodeSerializer(many=True),
        parameters=[OpenApiParameter("pool", str), OpenApiParameter("state", str), OpenApiParameter("name", str)],
    )
    def get(self, request):
        params = request.query_params
        pool, state, name = params.get("pool", ""), params.get("state", ""), params.get("name", "")
        errors = {}
        if state and state not in dict(Node.STATES):
            errors["state"] = [f"must be one of {', '.join(s for s, _label in Node.STATES)}; got {state!r}"]
        if pool and not Pool.objects.filter(name=pool).exists():
            pools = Pool.objects.order_by("name").values_list("name", flat=True)
            errors["pool"] = [f"no pool named {pool!r}; pools: {', '.join(pools)}"]
        if len(name) > Node._meta.get_field("name").max_length:
            errors["name"] = [f"at most {Node._meta.get_field('name').max_length} characters"]
        if errors:
            raise ValidationError(errors)
        nodes = nodes_matching(pool=pool, state=state, q=name).prefetch_related(
            Prefetch("gpus", queryset=Gpu.objects.filter(present=True).select_related("model").order_by("index")))
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(nodes, request, view=self)
        return paginator.get_paginated_response(NodeSerializer(page, many=True).data)


class NodeStateAPI(APIView):
    """Platform admins drain or resume a node, with a reason."""

    permission_classes = [IsAdminUser]
    target_state = Node.DRAINING

    @extend_schema(request=NodeStateInputSerializer, responses=NodeSerializer)
    def post(self, request, name: str):
        node = get_object_or_404(Node, name=name)
        data = NodeStateInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            node = node_set_state(node=node, state=self.target_state, reason=data.validated_data["reason"],
                                  user=request.user)
        except NodeProtocolError as exc:
            raise ValidationError({exc.field or "detail": str(exc)}) from None
        return Response(NodeSerializer(node).data)


class PriorityClassListAPI(ListAPIView):
    """The priority classes, and which of your teams may submit with each (restricted classes are granted
    to some teams only)."""

    serializer_class = PriorityClassSerializer
    pagination_class = None
    queryset = PriorityClass.objects.prefetch_related("teams")

    def get_serializer_context(self):
        return {**super().get_serializer_context(), "submit_teams": list(submit_teams_for(self.request.user))}
