"""The job list's answer (``GET /api/v1/jobs/``) read as rows, not as model instances.

A page of 50 jobs read as ``Job`` objects with their team, user, model, class and pool joined built 250 model
instances and read 150 timestamps through Django's Python loader, then rendered each job field by field through
DRF's attribute lookups: about 9 of the request's 11 ms of CPU (``bench/api_profile.py --profile list``). Here a
page is one ``values_list`` row per job (timestamps read by psycopg's C loader, ``portal.dbrows``), rendered by
``JobSerializer``'s own fields, in its order: the same answer, each value converted by the very field that
converts it there. The fields that are not a column of the job or of one related row are rendered here by
name (``_COMPUTED``); a field added to ``JobSerializer`` that is neither makes the plan fail loudly (and
``tests/scheduler/test_request_costs.py`` compares both answers for jobs of every shape).

A job that holds a service port (a notebook or a service, running or not) is rendered from its model
instance, as before (a query more, for such jobs only): its ``connect_url`` and ``notebook_url`` are the
model's rules (``Job.connect_url``, ``scheduler.notebooks.notebook_url``), and a job without a port has
neither (both are None)."""

from __future__ import annotations

import functools

from django.db import connections
from django.db.models import Exists, JSONField, OuterRef, Prefetch, QuerySet, Subquery
from rest_framework.fields import Field

from portal.dbrows import CompiledQuery
from scheduler.api.serializers import _ALLOCATION, JobSerializer
from scheduler.models import Allocation, Job
from scheduler.models.jobs import PREFETCHED_ALLOCATIONS
from scheduler.selectors import JOB_ROW_RELATED, JobPage

PENDING_REASON = ("pending_reason_code", "pending_reason_message", "pending_reason_details")
_COMPUTED = ("pending_reason", "allocations", "connect_url", "notebook_url")
SERVICE_PORT = "service_port"  # read to choose the instance path, not shown


class _Plan:
    """What a row holds (``paths``: ORM paths for ``values_list``) and how each answer field is made from it:
    ``(name, index, field, converter)`` per column-backed field (``converter``: the model field's
    ``from_db_value`` for values the raw cursor gives undecoded, such as JSON), and where the computed
    fields read their columns."""

    def __init__(self):
        self.paths: list[str] = []
        self.fields: list[tuple] = []
        for name, column, field in JobSerializer._planned_fields():
            if name in _COMPUTED:
                self.fields.append((name, None, None, None))
                continue
            if type(field).get_attribute is not Field.get_attribute:
                raise TypeError(f"JobSerializer.{name}: not a column; render it in scheduler.api.job_rows")
            path = column or "__".join(field.source_attrs)
            self.fields.append((name, self._index(path), field, _converter(Job, path)))
        self.pending = [self._index(p) for p in PENDING_REASON]
        self.pending_details = _converter(Job, PENDING_REASON[2])
        self.pk, self.attempt = self._index("id"), self._index("attempt")
        self.service_port = self._index(SERVICE_PORT)

    def _index(self, path: str) -> int:
        if path not in self.paths:
            self.paths.append(path)
        return self.paths.index(path)


def _converter(model, path: str):
    """What turns the raw cursor's value of ``path`` into the ORM's: the model field's ``from_db_value``, if it
    has one; for a JSON field without a decoder of its own, empty objects and lists (most rows' labels, retry
    ends and reason details) made without the JSON decoder."""
    *relations, last = path.split("__")
    for name in relations:
        model = model._meta.get_field(name).related_model
    field = model._meta.get_field(last)
    if isinstance(field, JSONField) and field.decoder is None:
        return functools.partial(_json, field.from_db_value)
    return getattr(field, "from_db_value", None)


def _json(decode, value, expression, connection):
    if value == "{}":
        return {}
    if value == "[]":
        return []
    return decode(value, expression, connection)


_plan: _Plan | None = None


def _the_plan() -> _Plan:
    global _plan
    if _plan is None:  # two threads may both build it: harmless, they build the same
        _plan = _Plan()
    return _plan


_statements: dict[str, CompiledQuery] = {}


def _statement(order: str) -> CompiledQuery:
    """The page's read in ``order``, compiled once (``portal.dbrows.CompiledQuery``): the plan's columns and
    whether the job holds allocations of its current attempt (the only ones a row shows), so a page with none
    (a page of the queue) reads no allocations. A related row's column (the team's name, the submitter's) is
    read by a scalar subquery, not a join: with five joins beside the page's own subquery PostgreSQL took 1.3 ms
    to plan the statement at each request, 0.3 ms so, for the same execution time."""
    statement = _statements.get(order)
    if statement is None:
        names, selected = {}, []
        for path in _the_plan().paths:
            if "__" not in path:
                selected.append(path)
                continue
            relation, rest = path.split("__", 1)
            field = Job._meta.get_field(relation)
            alias = f"row_{path}"
            row = field.related_model.objects.filter(pk=OuterRef(field.attname)).order_by()  # one row, unsorted
            names[alias] = Subquery(row.values(rest))
            selected.append(alias)
        shown = Exists(Allocation.objects.filter(job_id=OuterRef("pk"), attempt=OuterRef("attempt")))
        statement = _statements[order] = CompiledQuery(
            lambda ids: Job.objects.filter(pk__in=ids).annotate(**names, shown_allocations=shown).order_by(order)
            .values_list(*selected, "shown_allocations"), ids=CompiledQuery.SUBQUERY)
    return statement


def job_answers(ids: QuerySet[Job], order: str = "-id") -> list[dict]:
    """The jobs of ``ids`` (a ``values("pk")`` queryset: a page of what the caller may see) in ``order``, as
    ``JobSerializer`` renders them: in one query, and one more for their allocations when a job holds some."""
    plan = _the_plan()
    connection = connections[ids.db]
    page = _statement(order).rows(ids.db, ids=ids)
    if not page:
        return []
    allocations: dict[int, list[Allocation]] = {}
    holding = [row[plan.pk] for row in page if row[-1]]
    if holding:
        for a in Allocation.objects.using(ids.db).filter(job_id__in=holding).select_related("node", "gpu",
                                                                                               "gpu__model"):
            allocations.setdefault(a.job_id, []).append(a)
    by_instance = _from_instances(ids.db, [row[plan.pk] for row in page if row[plan.service_port] is not None])
    answers = []
    for row in page:
        pk = row[plan.pk]
        if pk in by_instance:
            answers.append(by_instance[pk])
            continue
        answer = {}
        for name, index, field, converter in plan.fields:
            if index is None:
                answer[name] = _computed(name, row, plan, allocations.get(pk, ()), connection)
                continue
            value = row[index]
            if value is not None and converter is not None:
                value = converter(value, None, connection)
            answer[name] = None if value is None else field.to_representation(value)
        answers.append(answer)
    return answers


def _computed(name: str, row: tuple, plan: _Plan, allocations, connection):
    """``JobSerializer``'s fields that are not one column, for a job without a service port."""
    if name == "pending_reason":  # PendingReasonField
        code, message, details = (row[i] for i in plan.pending)
        if not code:
            return None
        return {"code": code, "message": message, "details": plan.pending_details(details, None, connection)}
    if name == "allocations":  # JobSerializer.get_allocations
        attempt = row[plan.attempt]
        return [_ALLOCATION.to_representation(a) for a in allocations if a.attempt == attempt]
    return None  # connect_url, notebook_url: a job holding no service port has no address


def _from_instances(using: str, pks: list[int]) -> dict[int, dict]:
    """The jobs ``pks`` rendered from their model instances, as the list rendered every job before."""
    if not pks:
        return {}
    jobs = Job.objects.using(using).select_related(*JOB_ROW_RELATED).filter(pk__in=pks).prefetch_related(
        Prefetch("allocations", queryset=Allocation.objects.select_related("node", "gpu", "gpu__model"),
                 to_attr=PREFETCHED_ALLOCATIONS))
    return {job.pk: JobSerializer(job).data for job in jobs}


class JobAnswerPage(JobPage):
    """``JobPage`` whose slices are the answer's rows (``job_answers``), not model instances."""

    def __init__(self, jobs: QuerySet[Job], order: str):
        super().__init__(jobs, Job.objects.all(), order)
        self.order = order

    def __getitem__(self, page: slice) -> list[dict]:
        return job_answers(self.jobs.values("pk")[page], self.order)
