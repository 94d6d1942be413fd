"""Jobs, their recorded history and logs, priority classes, allocations and preemption records."""

import re

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from portal.models import Team, slug_validator
from scheduler.kinds import KIND_CHOICES
from scheduler.models.cluster import Gpu, GpuModel, Node, Pool


class PriorityClassQuerySet(models.QuerySet):
    def usable_by(self, team: Team) -> "PriorityClassQuerySet":
        """The classes ``team`` may submit with: every unrestricted class and the restricted ones granted
        to it."""
        granted = PriorityClass.teams.through.objects.filter(priorityclass_id=models.OuterRef("pk"), team_id=team.pk)
        return self.filter(models.Q(restricted=False) | models.Exists(granted))


class PriorityClass(models.Model):
    """Higher ``value`` runs first. ``preemptible`` is the default for its jobs; ``may_preempt`` lets its
    jobs preempt lower-priority work; times in seconds. A ``restricted`` class is for the ``teams`` a
    platform admin granted it only (like a Slurm QOS allowed per account): anyone could otherwise ask for
    the class that preempts everyone else's work."""

    name = models.CharField(max_length=63, unique=True, validators=[slug_validator])
    value = models.IntegerField(unique=True)
    description = models.CharField(max_length=200, blank=True)
    preemptible = models.BooleanField(default=True)
    may_preempt = models.BooleanField(default=True)
    min_runtime_s = models.PositiveIntegerField(default=0)
    grace_period_s = models.PositiveIntegerField(default=30)
    restricted = models.BooleanField(default=False)
    teams = models.ManyToManyField(Team, blank=True, related_name="priority_classes")

    objects = PriorityClassQuerySet.as_manager()

    class Meta:
        ordering = ["-value"]
        verbose_name_plural = "priority classes"

    def __str__(self) -> str:
        return self.name

    def usable_among(self, teams) -> list[Team]:
        """Those of ``teams`` that may submit with this class (prefetch ``teams`` when asking per class)."""
        if not self.restricted:
            return list(teams)
        granted = {t.pk for t in self.teams.all()}
        return [t for t in teams if t.pk in granted]

    def usable_by(self, team: Team) -> bool:
        return bool(self.usable_among([team]))


class JobState(models.TextChoices):
    PENDING = "pending"
    HELD = "held"
    ADMITTED = "admitted"
    STARTING = "starting"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed-out"
    NODE_LOST = "node-lost"


WAITING_STATES = (JobState.PENDING, JobState.HELD)
HOLDING_STATES = (JobState.ADMITTED, JobState.STARTING, JobState.RUNNING)
FINAL_STATES = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.TIMED_OUT, JobState.NODE_LOST)
ACTIVE_STATES = WAITING_STATES + HOLDING_STATES


class StopReason(models.TextChoices):
    """Why the portal asked a holding job's processes to stop (carried out by the node agent)."""

    NONE = ""
    CANCEL = "cancel"
    PREEMPT = "preempt"
    TIMEOUT = "timeout"
    NODE_UNHEALTHY = "node-unhealthy"
    GANG_EXIT = "gang-exit"  # another member of a multi-node gang ended
    IDLE = "idle"  # an interactive job left idle past its idle timeout is reclaimed


class FailureReason(models.TextChoices):
    """What a node may name as the cause of an attempt's end (docs/node-protocol.md, job events)."""

    NONE = ""
    OOM_KILLED = "OOMKilled"  # the job exceeded its memory limit and the kernel killed it
    IMAGE_PULL_FAILED = "ImagePullFailed"  # the job's image could not be found or pulled
    UNHEALTHY = "Unhealthy"  # its health probe failed too often: the node stopped it (a service is restarted)


# Where list views prefetch a job's allocations to (a plain list: see scheduler/api/views.py).
PREFETCHED_ALLOCATIONS = "prefetched_allocations"


class Job(models.Model):
    """One submitted unit of work: its request, state, why it waits and what it holds."""

    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="jobs")
    submitted_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="jobs")
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=20, choices=KIND_CHOICES, default="training")
    command = models.TextField(max_length=10000)
    image = models.CharField(max_length=300, blank=True)
    gpus = models.PositiveIntegerField(default=1, validators=[MinValueValidator(1), MaxValueValidator(1024)])
    gpu_fraction = models.DecimalField(max_digits=4, decimal_places=3, null=True, blank=True)
    gpu_model = models.ForeignKey(GpuModel, null=True, blank=True, on_delete=models.PROTECT, related_name="jobs")
    gpu_memory_gb = models.PositiveIntegerField(default=0)
    cpus = models.PositiveIntegerField(default=0)
    memory_gb = models.PositiveIntegerField(default=0)
    nodes = models.PositiveSmallIntegerField(null=True, blank=True)
    pool = models.ForeignKey(Pool, null=True, blank=True, on_delete=models.PROTECT, related_name="jobs")
    node_labels = models.JSONField(default=dict, blank=True)
    min_driver_version = models.CharField(max_length=40, blank=True)
    time_limit_minutes = models.PositiveIntegerField(null=True, blank=True)
    priority_class = models.ForeignKey(PriorityClass, on_delete=models.PROTECT, related_name="jobs")
    preemptible = models.BooleanField(default=True)
    env = models.JSONField(default=dict, blank=True)
    idle_timeout_minutes = models.PositiveIntegerField(null=True, blank=True)
    service_port = models.PositiveIntegerField(null=True, blank=True)  # notebooks and inference: where it listens
    # host:port the running attempt answers on, as its agent reports it (reachable from the portal); "" when none
    service_address = models.CharField(max_length=300, blank=True, default="")
    # what its node's health probe says of the running attempt (ROTA_HEALTH_PATH): "" when it is not probed,
    # else starting / healthy / unhealthy; the gateway sends traffic only to "" and healthy (docs/gateway.md)
    service_health = models.CharField(max_length=10, blank=True, default="")
    service_health_message = models.CharField(max_length=300, blank=True, default="")
    not_before = models.DateTimeField(null=True, blank=True)  # restart backoff: not scheduled before this
    restarts = models.PositiveIntegerField(default=0)

    state = models.CharField(max_length=12, choices=JobState.choices, default=JobState.PENDING)
    stop_reason = models.CharField(max_length=20, choices=StopReason.choices, blank=True, default="")
    attempt = models.PositiveIntegerField(default=1)
    pending_reason_code = models.CharField(max_length=40, blank=True)
    pending_reason_message = models.CharField(max_length=500, blank=True)
    pending_reason_details = models.JSONField(default=dict, blank=True)
    queue_position = models.PositiveIntegerField(null=True, blank=True)
    estimated_start = models.DateTimeField(null=True, blank=True)

    created_at = models.DateTimeField(auto_now_add=True)
    admitted_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    last_checkpoint_at = models.DateTimeField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    failure_class = models.CharField(max_length=20, blank=True)  # user | platform | resource
    # Why the node said the last attempt failed, when it knows: "OOMKilled" or "ImagePullFailed" (FailureReason),
    # with its words (the limit it hit, the image it could not pull).
    failure_reason = models.CharField(max_length=20, blank=True)
    failure_message = models.CharField(max_length=500, blank=True)
    attained_gpu_seconds = models.FloatField(default=0)

    # A task of a job array (scheduler.models.arrays): its array and its index there (ROTA_ARRAY_INDEX).
    array = models.ForeignKey("scheduler.JobArray", null=True, blank=True, on_delete=models.PROTECT,
                              related_name="tasks")
    array_index = models.PositiveIntegerField(null=True, blank=True)
    # What the user wrote after --dependency ("afterok:12:13,afterany:5_*"); the rows in JobDependency
    # (scheduler.models.dependencies) are what the cycle reads.
    dependency = models.CharField(max_length=500, blank=True, default="")
    # Retries (scheduler.retries): after an end of a kind in ``retry_on`` the job is queued again, at most
    # ``max_retries`` times, the n-th after ``retry_backoff_s`` * 2 ** (n - 1) seconds; ``retries``: so far.
    max_retries = models.PositiveSmallIntegerField(default=0)
    retry_on = models.JSONField(default=list, blank=True)
    retry_backoff_s = models.PositiveIntegerField(default=30)
    retries = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["state"], name="job_state_idx"),
            models.Index(fields=["team", "state"], name="job_team_state_idx"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(state__in=[s.value for s in JobState]), name="job_state_valid"
            ),
            models.CheckConstraint(
                condition=models.Q(gpu_fraction__isnull=True)
                | (models.Q(gpu_fraction__gt=0) & models.Q(gpu_fraction__lt=1) & models.Q(gpus=1)),
                name="job_gpu_fraction_valid",
            ),
            models.CheckConstraint(condition=models.Q(gpus__gte=1), name="job_gpus_positive"),
            models.UniqueConstraint(fields=["array", "array_index"], name="job_unique_array_index"),
            models.CheckConstraint(
                condition=models.Q(array__isnull=True, array_index__isnull=True)
                | models.Q(array__isnull=False, array_index__isnull=False),
                name="job_array_index_with_array",
            ),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.name}"

    @property
    def service_name(self) -> str:
        """The inference service this job is a replica of: its name without ``-N`` (docs/gateway.md); "" for
        other kinds and for names the gateway cannot serve (not a slug)."""
        name = re.sub(r"-[0-9]+\Z", "", self.name) if self.kind == "inference" else ""
        return name if re.fullmatch(r"[-a-zA-Z0-9_]+", name) else ""

    @property
    def is_active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def is_final(self) -> bool:
        return self.state in FINAL_STATES

    def all_allocations(self) -> list:
        """Every allocation of the job: the list a list view prefetched (PREFETCHED_ALLOCATIONS), else a query."""
        prefetched = getattr(self, PREFETCHED_ALLOCATIONS, None)
        return prefetched if prefetched is not None else list(self.allocations.all())

    @property
    def connect_url(self) -> str | None:
        """Where a running notebook (the portal's proxy: ``notebook_url``) or inference replica (its service's
        gateway, ``/serve/<team>/<service>/``, with a key: docs/gateway.md) is reached."""
        if self.kind == "notebook":
            return self.notebook_url
        if self.service_port is None or self.state != JobState.RUNNING:
            return None
        if self.kind == "inference" and self.service_name:
            return f"/serve/{self.team.name}/{self.service_name}/"
        alloc = next((a for a in self.all_allocations() if a.ended_at is None), None)
        return f"http://{alloc.node.name}:{self.service_port}/" if alloc else None

    @property
    def notebook_url(self) -> str | None:
        """A running notebook's address in the portal (``/notebooks/<id>/``, members of its team only)."""
        from scheduler.notebooks import notebook_url

        return notebook_url(self)

    @property
    def gpu_share(self) -> float:
        """GPUs counted against quota: the fraction for a shared job, else the GPU count."""
        return float(self.gpu_fraction) if self.gpu_fraction is not None else float(self.gpus)


class KindImage(models.Model):
    """The image a workload kind's jobs run in when they name none, set by a platform admin (without a row:
    settings.ROTA_DEFAULT_IMAGE)."""

    kind = models.CharField(max_length=20, choices=KIND_CHOICES, unique=True)
    image = models.CharField(max_length=300)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["kind"]

    def __str__(self) -> str:
        return f"{self.kind}: {self.image}"


class JobTransition(models.Model):
    """One recorded state change of a job, with its cause (and actor when a person caused it)."""

    # indexed by transition_job_at_idx (job first), so not on its own too
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="transitions", db_index=False)
    from_state = models.CharField(max_length=12, blank=True)
    to_state = models.CharField(max_length=12)
    at = models.DateTimeField()
    cause = models.CharField(max_length=300)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["at", "id"]
        indexes = [
            # a job's transitions in order (its page; the transition before an admission, for the wait metric)
            models.Index(fields=["job", "at", "id"], name="transition_job_at_idx"),
            # the admissions alone, which the Kueue-named metrics count and time on every scrape
            models.Index(fields=["job"], condition=models.Q(to_state="admitted"), name="transition_admitted_idx"),
        ]


class JobLog(models.Model):
    """The captured stdout/stderr of one attempt of a job, appended by its node."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="logs")
    attempt = models.PositiveIntegerField()
    content = models.TextField(blank=True, default="")
    size = models.PositiveBigIntegerField(default=0)  # bytes received (UTF-8), for offsets
    truncated = models.BooleanField(default=False)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job", "attempt"], name="joblog_unique_job_attempt")]


class Allocation(models.Model):
    """A job bound to one GPU (or a share of it) on one node over ``[started_at, ended_at)``.
    Open allocations (``ended_at`` null) are who holds what now; the database refuses to put one GPU in
    two open exclusive allocations, and (on PostgreSQL) shares of one GPU that add up to more than 1."""

    job = models.ForeignKey(Job, on_delete=models.PROTECT, related_name="allocations")
    attempt = models.PositiveIntegerField()
    gpu = models.ForeignKey(Gpu, on_delete=models.PROTECT, related_name="allocations")
    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="allocations")
    share_milli = models.PositiveIntegerField(default=1000)  # thousandths of the device
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["ended_at"], name="alloc_ended_idx")]
        constraints = [
            models.UniqueConstraint(
                fields=["gpu"],
                condition=models.Q(ended_at__isnull=True, share_milli=1000),
                name="alloc_one_open_exclusive_per_gpu",
            ),
            models.UniqueConstraint(
                fields=["job", "attempt", "gpu"], name="alloc_unique_job_attempt_gpu"
            ),
            models.CheckConstraint(
                condition=models.Q(share_milli__gte=1) & models.Q(share_milli__lte=1000), name="alloc_share_range"
            ),
            models.CheckConstraint(
                condition=models.Q(ended_at__isnull=True) | models.Q(ended_at__gte=models.F("started_at")),
                name="alloc_interval_ordered",
            ),
        ]

    @property
    def share(self) -> float:
        return self.share_milli / 1000


class Preemption(models.Model):
    """Who preempted whom, why, and the GPU-seconds of work lost (since the victim's last checkpoint).

    Until ``completed_at`` (the moment the victim's processes were gone, its allocations closed)
    ``gpu_seconds_lost`` is the engine's estimate at the decision; from then on it is the work the attempt
    lost, measured from ``work_since`` (its last checkpoint, else its start) by ``scheduler.checkpoints``, and
    credited back to the team (fair share and chargeback)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="preemptions")
    attempt = models.PositiveIntegerField()
    by_job = models.ForeignKey(Job, null=True, on_delete=models.SET_NULL, related_name="+")
    reason = models.CharField(max_length=40)
    message = models.CharField(max_length=500)
    gpu_seconds_lost = models.FloatField(default=0)
    at = models.DateTimeField()
    work_since = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-at"]
        indexes = [models.Index(fields=["completed_at"], name="preemption_completed_idx")]
