"""Job arrays: submit many tasks in one go (Slurm's ``--array``), see them as one, cancel them as one."""

import copy
import re
from dataclasses import dataclass

from django.core.exceptions import ValidationError
from django.db import transaction

from portal.access import can_manage_array
from scheduler.models import Job, JobArray, JobTransition
from scheduler.models.jobs import ACTIVE_STATES, JobState
from scheduler.services.common import db_now
from scheduler.services.dependencies import dependencies_save
from scheduler.services.jobs import NotAllowed, cancel_one, job_request_checked, wake_cycle

MAX_ARRAY_TASKS = 1000  # tasks in one array (Slurm's MaxArraySize is 1001)
MAX_ARRAY_INDEX = 99_999
MAX_ARRAY_SPEC = 200  # characters
ARRAY_RULE = ('write indices as "0-99", "1,3,5" or "0-98:2" (a step), optionally with "%N" to run at most N '
              "at once, e.g. \"0-99%8\"")
_PART = re.compile(r"(\d+)(?:-(\d+)(?::(\d+))?)?\Z")


@dataclass(frozen=True)
class ArraySpec:
    """A parsed ``--array`` value: the task indices in order and the cap on tasks running at once."""

    indices: tuple[int, ...]
    max_running: int | None


def array_spec_parse(text: str) -> ArraySpec:
    """Parse ``"0-99%8"``, ``"1,3,5"``, ``"0-98:2"``; ValidationError (field ``array``) says what is wrong."""
    def refuse(why: str):
        return ValidationError({"array": f"{why}; {ARRAY_RULE}"})

    text = (text or "").strip()
    if not text:
        raise refuse("must not be empty")
    if len(text) > MAX_ARRAY_SPEC:
        raise refuse(f"must be at most {MAX_ARRAY_SPEC} characters; got {len(text)}")
    body, sep, cap = text.partition("%")
    max_running = None
    if sep:
        if not cap.isdigit() or int(cap) < 1:
            raise refuse(f"the cap after % must be a whole number of at least 1; got {cap!r}")
        max_running = int(cap)
    indices: set[int] = set()
    for part in body.split(","):
        match = _PART.match(part.strip())
        if not match:
            raise refuse(f"cannot read {part.strip()!r}")
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        step = int(match.group(3)) if match.group(3) is not None else 1
        if last < first:
            raise refuse(f"the range {first}-{last} runs backwards")
        if step < 1:
            raise refuse("a step must be at least 1")
        if last > MAX_ARRAY_INDEX:
            raise refuse(f"indices must be at most {MAX_ARRAY_INDEX}; got {last}")
        if (last - first) // step + 1 + len(indices) > MAX_ARRAY_TASKS:
            raise refuse(f"an array has at most {MAX_ARRAY_TASKS} tasks")
        indices.update(range(first, last + 1, step))
    if len(indices) > MAX_ARRAY_TASKS:
        raise refuse(f"an array has at most {MAX_ARRAY_TASKS} tasks; got {len(indices)}")
    return ArraySpec(indices=tuple(sorted(indices)), max_running=max_running)


def array_submit(*, user, array: str, **request) -> JobArray:
    """Validate ``request`` like ``job_submit`` and ``array`` (see ``array_spec_parse``), then queue one
    pending job per index, all in one transaction: every task or none. Each task runs with
    ``ROTA_ARRAY_ID`` and ``ROTA_ARRAY_INDEX`` in its environment, and waits for the same dependencies."""
    errors, spec = {}, None
    try:
        spec = array_spec_parse(array)
    except ValidationError as exc:
        errors.update(exc.message_dict)
    template, deps = job_request_checked(user=user, tasks=len(spec.indices) if spec else 1, errors=errors,
                                        **request)
    with transaction.atomic():
        now = db_now()
        job_array = JobArray.objects.create(
            team=template.team, submitted_by=user, name=template.name, spec=array.strip(), size=len(spec.indices),
            max_running=spec.max_running)
        tasks = []
        for index in spec.indices:
            task = copy.copy(template)
            task._state = copy.copy(template._state)  # each task its own saved/unsaved state
            task.array, task.array_index = job_array, index
            tasks.append(task)
        tasks = Job.objects.bulk_create(tasks)
        dependencies_save(tasks, deps)
        JobTransition.objects.bulk_create(
            JobTransition(job=task, from_state="", to_state=JobState.PENDING, at=now, actor=user,
                          cause=f"submitted as task {task.array_index} of array {job_array.pk}")
            for task in tasks)
        wake_cycle()
    return job_array


def array_cancel(*, user, job_array: JobArray) -> int:
    """Cancel every task of ``job_array`` that has not ended (as ``job_cancel`` does each); returns how many
    were cancelled or asked to stop. Only who may manage its jobs may (the submitter, a team-admin, a
    platform admin)."""
    if not can_manage_array(user, job_array):
        raise NotAllowed("only the submitter, a team-admin or a platform admin may cancel this array")
    with transaction.atomic():
        now = db_now()
        ids = list(job_array.tasks.filter(state__in=ACTIVE_STATES).order_by("pk").values_list("pk", flat=True))
        return sum(cancel_one(pk, user=user, now=now) for pk in ids)

