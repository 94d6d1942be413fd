"""Holds before placement: waiting jobs the cycle leaves out of the engine's snapshot, each with its reason.

The engine (``scheduler.core``) places whatever waiting work it is given. Some pending jobs may not be
given to it at all, whatever the cluster looks like:

* ``over_budget``: the team has spent an enforced budget (``BudgetExceeded``);
* ``array_task_limit``: the job is a task of an array that already holds its ``%N`` tasks at once
  (``JobArrayTaskLimit``, Slurm's word);
* dependencies (``scheduler.dependencies``): the job waits for other jobs to end (``Dependency``).

Each rule reads what it needs in one query and returns ``{job_id: Hold}``; ``hold_back`` applies them in
order (a job held by one rule is not asked about by the next) and returns the snapshot without the held
jobs. The cycle and the quote both call ``hold_back``, so a quote waits for the same reasons as a job.
"""

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from scheduler.core.types import PENDING, Snapshot
from scheduler.models import Job
from scheduler.models.jobs import ACTIVE_STATES, HOLDING_STATES


@dataclass(frozen=True)
class Hold:
    """Why the cycle keeps a pending job away from the engine: a pending reason (code, message, details)."""

    code: str
    message: str
    details: dict = field(default_factory=dict)


def over_budget(snapshot: Snapshot, pending: list[int]) -> dict[int, Hold]:
    """The waiting jobs of teams past an enforced budget."""
    from accounting.budgets import exceeded_teams

    over = exceeded_teams()
    if not over:
        return {}
    team_of = {j.id: j.team for j in snapshot.jobs}
    return {pk: Hold("BudgetExceeded", over[team_of[pk]]) for pk in pending if team_of[pk] in over}


@dataclass(frozen=True)
class ArrayTask:
    """One active task of a capped array, as ``array_limit_holds`` reads it."""

    job_id: int
    index: int
    holding: bool  # admitted, starting or running (it holds, or is about to hold, GPUs)


def array_limit_holds(array_id: int, max_running: int, tasks: Iterable[ArrayTask],
                      pending: set[int]) -> dict[int, Hold]:
    """The pending tasks of one array to keep back so that at most ``max_running`` hold GPUs at once: the
    room left goes to the lowest indices, the rest wait (``pending``: the tasks the engine would see)."""
    tasks = list(tasks)
    holding = sum(t.holding for t in tasks)
    waiting = sorted((t for t in tasks if t.job_id in pending), key=lambda t: t.index)
    room = max(0, max_running - holding)
    cap = f"array {array_id} runs at most {max_running} task{'s' if max_running != 1 else ''} at once"
    details = {"array_id": array_id, "max_running": max_running}
    hold = Hold("JobArrayTaskLimit", f"{cap}; its next task starts when one of them ends", details)
    return {t.job_id: hold for t in waiting[room:]}


def array_task_limit(snapshot: Snapshot, pending: list[int]) -> dict[int, Hold]:
    """Tasks of capped arrays past their array's ``%N`` (one query over the active tasks of capped arrays)."""
    rows = (Job.objects.filter(state__in=ACTIVE_STATES, array__max_running__isnull=False)
            .values_list("id", "array_id", "array_index", "array__max_running", "state"))
    arrays: dict[int, tuple[int, list[ArrayTask]]] = {}
    for pk, array_id, index, max_running, state in rows:
        arrays.setdefault(array_id, (max_running, []))[1].append(ArrayTask(pk, index, state in HOLDING_STATES))
    waiting = set(pending)
    held: dict[int, Hold] = {}
    for array_id, (max_running, tasks) in arrays.items():
        held.update(array_limit_holds(array_id, max_running, tasks, waiting))
    return held


Rule = Callable[[Snapshot, list[int]], dict[int, Hold]]


def rules() -> tuple[Rule, ...]:
    """The hold rules in the order they apply (dependencies before the array cap: a task that may not
    start yet takes none of its array's room)."""
    from scheduler.dependencies import unmet_dependencies

    return (over_budget, unmet_dependencies, array_task_limit)


def hold_back(snapshot: Snapshot, only: tuple[Rule, ...] | None = None) -> tuple[Snapshot, dict[int, Hold]]:
    """The snapshot without the pending jobs some rule holds back, and those jobs with their hold."""
    held: dict[int, Hold] = {}
    for rule in only if only is not None else rules():
        pending = [j.id for j in snapshot.jobs if j.state == PENDING and j.id not in held]
        if pending:
            held.update(rule(snapshot, pending))
    if not held:
        return snapshot, {}
    return dataclasses.replace(snapshot, jobs=tuple(j for j in snapshot.jobs if j.id not in held)), held
