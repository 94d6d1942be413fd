"""Dependencies in the cycle: which pending jobs still wait for others, and which never can start.

``dependency_status`` is the rule (Slurm's meaning of afterok / afternotok / afterany); ``unmet_dependencies``
is the hold rule the cycle applies before placement (``scheduler.holds``): a job waiting for others is held
with ``Dependency``, one whose dependency can no longer be met with ``DependencyNeverSatisfied`` (the cycle
then ends it: see ``scheduler.dispatch.end_never_satisfied``).
"""

from scheduler.core.types import Snapshot
from scheduler.holds import Hold
from scheduler.models import JobDependency
from scheduler.models.jobs import FINAL_STATES, JobState

MET, WAITING, NEVER = "met", "waiting", "never"
WAITING_CODE, NEVER_CODE = "Dependency", "DependencyNeverSatisfied"
SHOWN = 5  # job ids a message names before "and N more"


def dependency_status(condition: str, state: str) -> str:
    """Whether a dependency ``condition`` on a job now in ``state`` is met, still waiting, or never met."""
    if state not in FINAL_STATES:
        return WAITING
    succeeded = state == JobState.SUCCEEDED
    if condition == "afterok":
        return MET if succeeded else NEVER
    if condition == "afternotok":
        return NEVER if succeeded else MET
    return MET  # afterany


def _ids(ids: list[int]) -> str:
    named = ", ".join(str(i) for i in ids[:SHOWN])
    return named + (f" and {len(ids) - SHOWN} more" if len(ids) > SHOWN else "")


def dependency_hold(deps: list[tuple[str, int, str]]) -> Hold | None:
    """The hold of a job whose dependencies are ``deps`` (condition, job id, that job's state), or None
    when every one is met."""
    never = [(c, on, state) for c, on, state in deps if dependency_status(c, state) == NEVER]
    if never:
        condition, on, state = never[0]
        message = (f"job {on} succeeded, and this job was to run only if it did not (afternotok)"
                   if condition == "afternotok" else
                   f"job {on} ended {state}, and this job was to run only after it succeeded (afterok)")
        return Hold(NEVER_CODE, message, {"jobs": sorted(on for _c, on, _s in never), "condition": condition})
    waiting = sorted(on for c, on, state in deps if dependency_status(c, state) == WAITING)
    if waiting:
        job_word = "job" if len(waiting) == 1 else "jobs"
        return Hold(WAITING_CODE, f"waiting for {job_word} {_ids(waiting)}", {"jobs": waiting})
    return None


def unmet_dependencies(snapshot: Snapshot, pending: list[int]) -> dict[int, Hold]:
    """The pending jobs whose dependencies are not all met (one query over their dependency rows)."""
    asked = set(pending)
    by_job: dict[int, list[tuple[str, int, str]]] = {}
    for job_id, condition, on, state in JobDependency.objects.filter(job__state=JobState.PENDING).values_list(
            "job_id", "condition", "on_id", "on__state").order_by():
        if job_id in asked:
            by_job.setdefault(job_id, []).append((condition, on, state))
    held = {}
    for job_id, deps in by_job.items():
        hold = dependency_hold(deps)
        if hold is not None:
            held[job_id] = hold
    return held
