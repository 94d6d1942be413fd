"""Dependencies at submit: read Slurm's ``--dependency`` syntax and resolve it to the jobs it names."""

import re
from dataclasses import dataclass

from django.core.exceptions import ValidationError

from portal.access import jobs_for
from scheduler.models import JobDependency

MAX_DEPENDENCY = 500  # characters
MAX_DEPENDENCY_ROWS = 10_000  # (jobs depended on) x (tasks of the submitted array)
DEPENDENCY_RULE = ('write it as Slurm does: "afterok:12:13,afterany:14" (afterok: after they succeed; '
                   "afternotok: after they end otherwise; afterany: after they end), where 7_* names every task "
                   "of array 7 and 7_3 its task 3")
CONDITIONS = tuple(c for c, _label in JobDependency.CONDITIONS)
_REF = re.compile(r"(\d{1,18})(?:_(\*|\d{1,9}))?\Z")


@dataclass(frozen=True)
class Dependency:
    """One resolved dependency: wait for job ``on`` to end as ``condition`` asks."""

    condition: str
    on: int


def _refuse(why: str) -> ValidationError:
    return ValidationError({"dependency": f"{why}; {DEPENDENCY_RULE}"})


def dependency_parse(text: str) -> list[tuple[str, str]]:
    """``"afterok:12:13,afterany:7_*"`` as ``[("afterok", "12"), ("afterok", "13"), ("afterany", "7_*")]``."""
    text = (text or "").strip()
    if len(text) > MAX_DEPENDENCY:
        raise _refuse(f"must be at most {MAX_DEPENDENCY} characters; got {len(text)}")
    terms = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        condition, *refs = part.split(":")
        if condition not in CONDITIONS:
            raise _refuse(f"{condition!r} is not a condition (use {', '.join(CONDITIONS)})")
        if not refs:
            raise _refuse(f"{condition} names no job")
        for ref in refs:
            if not _REF.match(ref):
                raise _refuse(f"cannot read the job {ref!r}")
            terms.append((condition, ref))
    if not terms:
        raise _refuse("names no job")
    return terms


def dependency_resolve(user, text: str) -> list[Dependency]:
    """The jobs ``text`` names, checked: each must be a job (or array) ``user`` may see; another team's job
    gets the same answer as a missing one. Only jobs that exist can be named, so no cycle can form."""
    terms = dependency_parse(text)
    visible = jobs_for(user)
    plain = {int(ref) for _c, ref in terms if "_" not in ref}
    found = set(visible.filter(pk__in=plain).values_list("pk", flat=True))
    arrays = {int(ref.split("_")[0]) for _c, ref in terms if "_" in ref}
    tasks: dict[tuple[int, int], int] = {}
    for pk, array_id, index in visible.filter(array_id__in=arrays).values_list("pk", "array_id", "array_index"):
        tasks[(array_id, index)] = pk
    out: dict[tuple[str, int], None] = {}
    for condition, ref in terms:
        if "_" not in ref:
            if int(ref) not in found:
                raise ValidationError({"dependency": f"no job of yours has the id {ref}"})
            out[(condition, int(ref))] = None
            continue
        array_id, which = int(ref.split("_")[0]), ref.split("_")[1]
        named = sorted(pk for (a, i), pk in tasks.items() if a == array_id and (which == "*" or i == int(which)))
        if not named:
            thing = f"array {array_id}" if which == "*" else f"task {which} of array {array_id}"
            raise ValidationError({"dependency": f"no {thing} of yours"})
        out.update(((condition, pk), None) for pk in named)
    return [Dependency(condition, on) for condition, on in out]


def dependency_rows_check(tasks: int, deps: list[Dependency]) -> None:
    """Refuse (field ``dependency``) more than MAX_DEPENDENCY_ROWS rows for ``tasks`` jobs."""
    if tasks * len(deps) > MAX_DEPENDENCY_ROWS:
        raise ValidationError({"dependency": f"{tasks} tasks each waiting for {len(deps)} jobs is more than "
                                             f"{MAX_DEPENDENCY_ROWS} dependencies; depend on fewer jobs"})


def dependencies_save(jobs, deps: list[Dependency]) -> None:
    """Store ``deps`` for each of ``jobs`` (saved jobs: one, or an array's tasks)."""
    JobDependency.objects.bulk_create(
        JobDependency(job=job, on_id=d.on, condition=d.condition) for job in jobs for d in deps)
