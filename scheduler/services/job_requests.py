"""What a job request may be: every field's check and limit, and the defaults applied (``job_request_build``,
``job_request_checked``). ``scheduler.services.jobs`` submits what passes; the API serializer and the forms
quote these limits."""

import re
import unicodedata
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError

from accounting.models import Budget
from portal.models import Team
from scheduler.images import ImageError, image_allowed, image_parse, image_resolve
from scheduler.kinds import KINDS
from scheduler.models import Job, Pool, PriorityClass
from scheduler.models.jobs import JobState
from scheduler.retries import MAX_BACKOFF_S, MAX_RETRIES, RETRY_KINDS
from scheduler.services import reference
from scheduler.services.dependencies import Dependency, dependency_resolve, dependency_rows_check

MAX_GPUS = 1024
MAX_NODES = 64
MAX_TIME_LIMIT_MINUTES = 30 * 24 * 60
MAX_CPUS = 4096
MAX_MEMORY_GB = 16384
MAX_GPU_MEMORY_GB = 1024
MAX_NAME = 100
MAX_COMMAND = 10000
MAX_IMAGE = 300
MAX_ENV = 100  # variables per job
MAX_ENV_NAME = 255
MAX_ENV_VALUE = 4000
MAX_LABELS = 20
MAX_LABEL = 100  # characters of a node-label key or value
DEFAULT_RETRY_BACKOFF_S = 30
# What a process environment accepts everywhere (POSIX portable names): a name with "=" or NUL in it
# cannot be passed to a process at all.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _has_control(text: str) -> bool:
    """Whether ``text`` holds a NUL or another control character other than tab and newlines."""
    return any(ord(c) < 32 and c not in "\t\n\r" for c in text)


def _invisible(text: str) -> str | None:
    """The first Unicode format character of ``text`` (bidi overrides and isolates, zero-width marks), if any:
    in a name shown to others, "abc\u202eexe" reads as "abcexe" reversed. The zero-width joiner is allowed: it
    joins emoji ("👩\u200d💻")."""
    return next((c for c in text if unicodedata.category(c) == "Cf" and c != "\u200d"), None)


def _map_errors(value, most: int, what: str) -> str | None:
    """Why ``value`` is not a mapping of strings to strings with at most ``most`` entries (``what``), or None."""
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        return "must be an object of string keys and string values"
    if len(value) > most:
        return f"at most {most} {what}; got {len(value)}"
    return None


def _env_errors(env) -> str | None:
    """Why ``env`` is not a usable process environment, or None."""
    problem = _map_errors(env, MAX_ENV, "variables")
    if problem:
        return problem
    for name, value in env.items():
        if len(name) > MAX_ENV_NAME:
            return f"variable names must be at most {MAX_ENV_NAME} characters; got {len(name)}"
        if not ENV_NAME.match(name):
            return (f"variable name {name[:40]!r} is not valid: use letters, digits and underscores, "
                    "not starting with a digit")
        if len(value) > MAX_ENV_VALUE:
            return f"the value of {name} must be at most {MAX_ENV_VALUE} characters; got {len(value)}"
        if "\x00" in value:
            return f"the value of {name} must not contain NUL characters"
    return None


def _labels_errors(labels) -> str | None:
    """Why ``labels`` are not node-label constraints (short printable strings), or None."""
    problem = _map_errors(labels, MAX_LABELS, "labels")
    if problem:
        return problem
    for key, value in labels.items():
        for what, text in (("keys", key), ("values", value)):
            if not text.strip() or len(text) > MAX_LABEL:
                return f"label {what} must be 1 to {MAX_LABEL} characters; got {len(text)}"
            if any(ord(c) < 32 for c in text):
                return f"label {what} must not contain control characters; got {text[:40]!r}"
    return None


def _check_range(errors: dict, field: str, value, low, high) -> None:
    if value is None:
        return
    if value < low or value > high:
        errors[field] = f"must be between {low} and {high}; got {value}"


FRACTION_RULE = "must be greater than 0 and less than 1, with at most 3 decimals (e.g. 0.25)"
# The messages of every check of a GPU fraction's text (form and API fields), so each says the same rule.
FRACTION_ERRORS = {key: FRACTION_RULE for key in ("invalid", "min_value", "max_value", "max_digits",
                                                  "max_decimal_places", "max_whole_digits")}


def waiting_for_cycle() -> dict:
    """What a job that joins (or rejoins) the queue says until the next cycle has looked at it."""
    return {"pending_reason_code": "Scheduling", "pending_reason_message": "waiting for the next scheduling cycle",
            "pending_reason_details": {}, "queue_position": None, "estimated_start": None}


def priority_class_refusal(pc: PriorityClass, team: Team, *, default_of: str | None = None) -> str:
    """Why ``team`` may not use restricted class ``pc`` (``default_of``: the kind whose default it is), with
    the classes it may use, nearest in priority first (not the one that preempts everyone)."""
    usable = sorted(PriorityClass.objects.usable_by(team).values_list("name", "value"),
                    key=lambda c: (abs(c[1] - pc.value), -c[1]))
    names = ", ".join(name for name, _value in usable) or "none"
    default = f" (the default for kind {default_of})" if default_of else ""
    return (f"priority class {pc.name}{default} is restricted to the teams a platform admin granted it; "
            f"team {team.name} may use: {names}")


def image_check(image: str, *, kind: str, team: Team | None, pool: Pool | None,
                lookups: reference.Reference | None = None) -> tuple[str, str | None]:
    """The image a job runs in (its own, else its kind's default; see ``runtime.job_image``) and why it may not
    (None: it may): not a full reference, or allowed by none of the pools it may run in (``pool`` if it names
    one, else its team's), naming each pool's allowed images. A team with no pool is told so by the pool
    check, not here."""
    lookups = lookups or reference.now()
    resolved = image_resolve(image, kind, lookups.kind_images(), settings.ROTA_DEFAULT_IMAGE)
    own = bool((image or "").strip())
    if len(resolved) > MAX_IMAGE:
        return resolved, f"must be at most {MAX_IMAGE} characters; got {len(resolved)}"
    try:
        ref = image_parse(resolved)
    except ImageError as exc:
        return resolved, str(exc) if own else f"the default image of kind {kind} is not usable ({exc}): name one"
    pools = [pool] if pool is not None else lookups.team_pools(team) if team is not None else []
    if not pools or any(image_allowed(ref, p.allowed_images) for p in pools):
        return str(ref), None
    allowed = "; ".join(f"pool {p.name} allows {', '.join(p.allowed_images) or 'no image'}" for p in pools)
    whose = f"pool {pool.name}" if pool is not None else f"the pools team {team.name} may use"
    return resolved, f"{ref} is not allowed in {whose} ({allowed}): use an allowed image or ask a platform admin"


def job_request_build(
    *,
    user,
    team: str | Team | None = None,
    name: str,
    command: str,
    kind: str = "training",
    gpus: int = 1,
    gpu_fraction: Decimal | float | None = None,
    gpu_model: str | None = None,
    gpu_memory_gb: int = 0,
    cpus: int = 0,
    memory_gb: int = 0,
    nodes: int | None = None,
    pool: str | None = None,
    node_labels: dict | None = None,
    min_driver_version: str = "",
    time_limit_minutes: int | None = None,
    priority_class: str | None = None,
    preemptible: bool | None = None,
    env: dict | None = None,
    image: str = "",
    idle_timeout_minutes: int | None = None,
    max_retries: int = 0,
    retry_on: list[str] | tuple[str, ...] | None = None,
    retry_backoff_s: int = DEFAULT_RETRY_BACKOFF_S,
    lookups: reference.Reference | None = None,
) -> Job:
    """Validate a job request and return it as an unsaved Job with every default applied. Raises
    ValidationError naming every bad field, with its limit or allowed values. ``lookups``: the reference rows
    as the caller read them already (``reference.of_request``), else as of now."""
    errors: dict[str, str] = {}
    lookups = lookups or reference.now()  # the teams, GPU models, pools, classes and images, as remembered
    allowed = lookups.submit_teams(user)
    team_obj = None
    if isinstance(team, Team):
        team_obj = next((t for t in allowed if t.pk == team.pk), None)
    elif team:
        team_obj = next((t for t in allowed if t.name == team), None)
    elif len(allowed) == 1:  # the team when it is the user's only one
        team_obj = allowed[0]
    if team_obj is None:
        errors["team"] = (
            "you are not a member of that team" if team else "choose a team (you belong to several or none)"
        )
    name = (name or "").strip()
    if not name:
        errors["name"] = "must not be empty"
    elif len(name) > MAX_NAME:
        errors["name"] = f"must be at most {MAX_NAME} characters; got {len(name)}"
    command = (command or "").strip() or KINDS.get(kind, KINDS["training"]).command  # notebook: JupyterLab
    if not command:
        errors["command"] = "must not be empty"
    elif len(command) > MAX_COMMAND:
        errors["command"] = f"must be at most {MAX_COMMAND} characters; got {len(command)}"
    elif "\x00" in command:
        errors["command"] = "must not contain NUL characters"
    if name and _has_control(name):
        errors["name"] = "must not contain control characters"
    elif name and (hidden := _invisible(name)):
        errors["name"] = (f"must not contain invisible or text-direction characters (found U+{ord(hidden):04X}): "
                          "they make a name read differently from what it is")
    if kind not in KINDS:
        errors["kind"] = f"must be one of {', '.join(KINDS)}; got {kind!r}"
    defaults = KINDS.get(kind, KINDS["training"])
    _check_range(errors, "gpus", gpus, 1, MAX_GPUS)
    if gpus is None:
        errors["gpus"] = f"must be a whole number between 1 and {MAX_GPUS}"
    if gpu_fraction is not None:
        gpu_fraction = Decimal(str(gpu_fraction)).quantize(Decimal("0.001"))
        if not (Decimal("0") < gpu_fraction < Decimal("1")):
            errors["gpu_fraction"] = f"{FRACTION_RULE}; got {gpu_fraction}"
        elif gpus != 1:
            errors["gpu_fraction"] = "a fractional request shares one GPU: set gpus to 1"
    _check_range(errors, "gpu_memory_gb", gpu_memory_gb, 0, MAX_GPU_MEMORY_GB)
    _check_range(errors, "cpus", cpus, 0, MAX_CPUS)
    _check_range(errors, "memory_gb", memory_gb, 0, MAX_MEMORY_GB)
    _check_range(errors, "nodes", nodes, 1, MAX_NODES)
    if nodes and gpus and gpus % nodes:
        errors["nodes"] = f"gpus ({gpus}) must divide evenly over nodes ({nodes})"
    if time_limit_minutes is None:
        time_limit_minutes = defaults.time_limit_minutes
    _check_range(errors, "time_limit_minutes", time_limit_minutes, 1, MAX_TIME_LIMIT_MINUTES)
    if idle_timeout_minutes is None:
        idle_timeout_minutes = defaults.idle_timeout_minutes
    _check_range(errors, "idle_timeout_minutes", idle_timeout_minutes, 5, MAX_TIME_LIMIT_MINUTES)
    model_obj = None
    if gpu_model:
        model_obj = lookups.gpu_models().get(gpu_model)
        if model_obj is None:
            known = ", ".join(lookups.gpu_models())
            errors["gpu_model"] = f"unknown GPU model {gpu_model!r}; known: {known}"
    pool_obj = None
    if pool:
        pool_obj = lookups.pools().get(pool)
        if pool_obj is None or (team_obj is not None and team_obj.pk not in pool_obj.team_ids):
            errors["pool"] = f"unknown pool {pool!r} or your team may not use it"
    image, problem = image_check(image, kind=kind, team=team_obj, pool=pool_obj, lookups=lookups)
    if problem and not (pool and "pool" in errors):
        errors["image"] = problem
    pc_name = priority_class or defaults.priority_class
    budget = lookups.budget_action(team_obj) if team_obj is not None else None
    if budget and budget[0] == Budget.BLOCK:
        errors["team"] = (f"{budget[1]}: its budget refuses new submissions until a platform admin raises it or "
                          "the month ends")
    elif budget and budget[0] == Budget.LOWER:
        lowest = PriorityClass.objects.usable_by(team_obj).order_by("value").first()
        pc_name = lowest.name if lowest else pc_name
    pc = lookups.priority_classes().get(pc_name)
    if pc is None:
        known = ", ".join(lookups.priority_classes())
        errors["priority_class"] = f"unknown priority class {pc_name!r}; known: {known}"
    elif team_obj is not None and not pc.usable_by(team_obj):
        errors["priority_class"] = priority_class_refusal(pc, team_obj, default_of=None if priority_class else kind)
    labels = node_labels or {}
    problem = _labels_errors(labels)
    if problem:
        errors["node_labels"] = problem
    environment = env or {}
    problem = _env_errors(environment)
    if problem:
        errors["env"] = problem
    if len(min_driver_version or "") > 40:
        errors["min_driver_version"] = "must be at most 40 characters"
    elif min_driver_version and _has_control(min_driver_version):
        errors["min_driver_version"] = "must not contain control characters"
    _retry_errors(errors, max_retries, retry_on, retry_backoff_s)
    if errors:
        raise ValidationError(errors)
    if preemptible is None:
        preemptible = pc.preemptible if priority_class else defaults.preemptible

    job = Job(
        team=team_obj, submitted_by=user, name=name, kind=kind, command=command, image=image,
        gpus=gpus, gpu_fraction=gpu_fraction, gpu_model=model_obj, gpu_memory_gb=gpu_memory_gb or 0,
        cpus=cpus or 0, memory_gb=memory_gb or 0, nodes=nodes, pool=pool_obj, node_labels=labels,
        min_driver_version=min_driver_version or "", time_limit_minutes=time_limit_minutes,
        priority_class=pc, preemptible=preemptible, env=environment, state=JobState.PENDING,
        idle_timeout_minutes=idle_timeout_minutes, max_retries=max_retries or 0, retry_on=list(retry_on or []),
        retry_backoff_s=retry_backoff_s,
        **waiting_for_cycle(),
    )
    job.lowered_by_budget = budget[1] if budget and budget[0] == Budget.LOWER else ""  # ``job_submit`` says why
    return job


def _retry_errors(errors: dict, max_retries, retry_on, backoff_s) -> None:
    """Name what is wrong with a retry policy (see ``scheduler.retries``) in ``errors``."""
    _check_range(errors, "max_retries", max_retries, 0, MAX_RETRIES)
    _check_range(errors, "retry_backoff_s", backoff_s, 0, MAX_BACKOFF_S)
    kinds = list(retry_on or [])
    unknown = [k for k in kinds if k not in RETRY_KINDS]
    if unknown or len(set(kinds)) != len(kinds):
        errors["retry_on"] = f"must be distinct values among {', '.join(RETRY_KINDS)}; got {', '.join(map(str, kinds))}"
    elif max_retries and not kinds:
        errors["retry_on"] = f"name the ends to retry ({', '.join(RETRY_KINDS)}): max_retries applies to them only"


def job_request_checked(*, user, dependency: str = "", tasks: int = 1, errors: dict | None = None,
                        **request) -> tuple[Job, list[Dependency]]:
    """``job_request_build`` and the jobs ``dependency`` names (Slurm's syntax, see
    ``scheduler.services.dependencies``) for ``tasks`` jobs, every bad field (and ``errors`` found before)
    named in one ValidationError."""
    errors = dict(errors or {})
    job, deps = None, []
    try:
        job = job_request_build(user=user, **request)
    except ValidationError as exc:
        errors.update(exc.message_dict)
    if (dependency or "").strip():
        try:
            deps = dependency_resolve(user, dependency)
            dependency_rows_check(tasks, deps)
        except ValidationError as exc:
            errors.update(exc.message_dict)
    if errors:
        raise ValidationError(errors)
    job.dependency = dependency.strip() if deps else ""
    return job, deps
