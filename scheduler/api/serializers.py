"""Input and output serializers for the jobs, nodes and cluster API."""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from portal.api import PlannedRepresentation, SharedFields
from scheduler.kinds import KINDS
from scheduler.models import Allocation, Job, JobArray, JobTransition, Node, PriorityClass
from scheduler.retries import MAX_BACKOFF_S, MAX_RETRIES, RETRY_KINDS
from scheduler.selectors import job_attempts
from scheduler.services import jobs as job_services
from scheduler.services.arrays import MAX_ARRAY_SPEC
from scheduler.services.dependencies import MAX_DEPENDENCY
from scheduler.services.runtime import job_how_it_runs


class JobInputSerializer(SharedFields, serializers.Serializer):
    """What a client may send to submit a job (shape and ranges; the service checks the rest). A field
    it does not know is an error, not ignored: a typo such as ``"gpu": 4`` must not quietly give 1 GPU."""

    name = serializers.CharField(max_length=job_services.MAX_NAME)
    team = serializers.CharField(max_length=63, required=False, allow_blank=True)
    kind = serializers.ChoiceField(
        choices=list(KINDS), default="training",
        error_messages={"invalid_choice": f'"{{input}}" is not a kind; allowed: {", ".join(KINDS)}'})
    command = serializers.CharField(max_length=job_services.MAX_COMMAND, required=False, allow_blank=True, default="",
                                    help_text="Blank for a notebook: JupyterLab, reached at notebook_url.")
    image = serializers.CharField(max_length=job_services.MAX_IMAGE, required=False, allow_blank=True, default="")
    gpus = serializers.IntegerField(min_value=1, max_value=job_services.MAX_GPUS, default=1)
    gpu_fraction = serializers.DecimalField(max_digits=4, decimal_places=3, required=False, allow_null=True,
                                            min_value=0, max_value=1, error_messages=job_services.FRACTION_ERRORS)
    gpu_model = serializers.CharField(max_length=63, required=False, allow_blank=True, allow_null=True)
    gpu_memory_gb = serializers.IntegerField(min_value=0, max_value=job_services.MAX_GPU_MEMORY_GB, default=0)
    cpus = serializers.IntegerField(min_value=0, max_value=job_services.MAX_CPUS, default=0)
    memory_gb = serializers.IntegerField(min_value=0, max_value=job_services.MAX_MEMORY_GB, default=0)
    nodes = serializers.IntegerField(min_value=1, max_value=job_services.MAX_NODES, required=False, allow_null=True)
    pool = serializers.CharField(max_length=63, required=False, allow_blank=True, allow_null=True)
    node_labels = serializers.DictField(child=serializers.CharField(max_length=job_services.MAX_LABEL),
                                        required=False)
    min_driver_version = serializers.CharField(max_length=40, required=False, allow_blank=True, default="")
    time_limit_minutes = serializers.IntegerField(
        min_value=1, max_value=job_services.MAX_TIME_LIMIT_MINUTES, required=False, allow_null=True
    )
    idle_timeout_minutes = serializers.IntegerField(
        min_value=5, max_value=job_services.MAX_TIME_LIMIT_MINUTES, required=False, allow_null=True,
        help_text="notebooks: stop after this long without GPU activity (blank: the kind's default)")
    priority_class = serializers.CharField(max_length=63, required=False, allow_blank=True, allow_null=True)
    preemptible = serializers.BooleanField(required=False, allow_null=True, default=None)
    env = serializers.DictField(child=serializers.CharField(max_length=job_services.MAX_ENV_VALUE,
                                                            allow_blank=True), required=False)
    array = serializers.CharField(
        max_length=MAX_ARRAY_SPEC, required=False, allow_blank=True,
        help_text='submit a job array: one task per index, e.g. "0-99", "1,3,5", "0-99%8" (at most 8 at once); '
                  "each task gets ROTA_ARRAY_ID and ROTA_ARRAY_INDEX")
    max_retries = serializers.IntegerField(
        min_value=0, max_value=MAX_RETRIES, default=0,
        help_text="queue the job again at most this many times after an end named in retry_on")
    retry_on = serializers.ListField(
        child=serializers.ChoiceField(choices=list(RETRY_KINDS)), required=False, max_length=len(RETRY_KINDS),
        help_text="the ends to retry: node-lost (retried anyway, up to the platform's limit, unless named here), "
                  "failed, start-failed, timed-out")
    retry_backoff_s = serializers.IntegerField(
        min_value=0, max_value=MAX_BACKOFF_S, default=job_services.DEFAULT_RETRY_BACKOFF_S,
        help_text="seconds before the first retry; each next one waits twice as long")
    dependency = serializers.CharField(
        max_length=MAX_DEPENDENCY, required=False, allow_blank=True,
        help_text='start only after other jobs end, in Slurm\'s syntax: "afterok:12:13,afterany:14"; 7_* names '
                  "every task of array 7")

    def to_internal_value(self, data):
        """The fields' own checks, with every unknown field named beside their errors (all at once)."""
        unknown = sorted(set(data) - set(self.fields)) if isinstance(data, dict) else []
        errors = {name: [f"unknown field; allowed: {', '.join(self.fields)}"] for name in unknown}
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if errors and isinstance(exc.detail, dict):
                raise serializers.ValidationError({**exc.detail, **errors}) from exc
            raise
        if errors:
            raise serializers.ValidationError(errors)
        return value


class PendingReasonSerializer(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()
    details = serializers.DictField()


@extend_schema_field(PendingReasonSerializer(allow_null=True))
class PendingReasonField(serializers.Field):
    def to_representation(self, job: Job):
        if not job.pending_reason_code:
            return None
        return {"code": job.pending_reason_code, "message": job.pending_reason_message,
                "details": job.pending_reason_details}


class AllocationSerializer(serializers.ModelSerializer):
    node = serializers.CharField(source="node.name")
    gpu_index = serializers.IntegerField(source="gpu.index")
    gpu_uuid = serializers.CharField(source="gpu.uuid")
    gpu_model = serializers.CharField(source="gpu.model.name")
    share = serializers.FloatField()

    class Meta:
        model = Allocation
        fields = ["node", "gpu_index", "gpu_uuid", "gpu_model", "share", "attempt", "started_at", "ended_at"]


_ALLOCATION = AllocationSerializer()


class TransitionSerializer(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor.username", default=None)

    class Meta:
        model = JobTransition
        fields = ["from_state", "to_state", "at", "cause", "actor", "details"]


class JobSerializer(PlannedRepresentation, serializers.ModelSerializer):
    """A job as clients see it (the contract in DESIGN.md). Rendered through fields bound once (see
    ``PlannedRepresentation``): every method field here reads the job alone, never the context."""

    team = serializers.CharField(source="team.name")
    submitted_by = serializers.CharField(source="submitted_by.username")
    gpu_model = serializers.CharField(source="gpu_model.name", default=None, allow_null=True)
    pool = serializers.CharField(source="pool.name", default=None, allow_null=True)
    priority_class = serializers.CharField(source="priority_class.name")
    gpu_fraction = serializers.FloatField(allow_null=True)
    pending_reason = PendingReasonField(source="*")
    allocations = serializers.SerializerMethodField()
    connect_url = serializers.CharField(read_only=True, allow_null=True,
                                        help_text="Where a running notebook (the portal's /notebooks/<id>/) or "
                                                  "inference service answers.")
    notebook_url = serializers.CharField(read_only=True, allow_null=True,
                                         help_text="A running notebook's address in the portal: /notebooks/<id>/, "
                                                   "open to members of its team (the proxy adds the token).")

    class Meta:
        model = Job
        fields = [
            "id", "name", "team", "submitted_by", "kind", "command", "image", "gpus", "gpu_fraction", "gpu_model",
            "gpu_memory_gb", "cpus", "memory_gb", "nodes", "pool", "node_labels", "min_driver_version",
            "time_limit_minutes", "priority_class", "preemptible", "state", "stop_reason", "attempt",
            "pending_reason", "queue_position", "estimated_start", "created_at", "admitted_at", "started_at",
            "finished_at", "exit_code", "failure_class", "failure_reason", "failure_message", "restarts",
            "connect_url", "notebook_url", "allocations",
            "array_id", "array_index", "dependency", "max_retries", "retry_on", "retry_backoff_s", "retries",
        ]

    def get_allocations(self, job: Job) -> list[dict]:
        # One serializer for every row: building one per job (its fields deep-copied each time) cost more
        # than the rest of a job's row.
        return [_ALLOCATION.to_representation(a) for a in job.all_allocations() if a.attempt == job.attempt]


class AttemptSerializer(serializers.Serializer):
    attempt = serializers.IntegerField()
    started_at = serializers.DateTimeField(allow_null=True)
    ended_at = serializers.DateTimeField(allow_null=True)
    nodes = serializers.ListField(child=serializers.CharField())
    gpu_seconds = serializers.FloatField()
    ended = serializers.CharField(help_text="how the attempt ended (a requeue or retry and why, or the job's end)")
    exit_code = serializers.IntegerField(allow_null=True)


class JobDetailSerializer(JobSerializer):
    transitions = TransitionSerializer(many=True, read_only=True)
    attempts = serializers.SerializerMethodField()
    runs = serializers.SerializerMethodField(
        help_text="How it runs, as its nodes are told: image, run_as (uid, gid, team), limits (cpus, memory_mb, "
                  "pids) and the executor of each node it holds GPUs on (the job page's \"How it runs\").")

    class Meta(JobSerializer.Meta):
        fields = JobSerializer.Meta.fields + ["env", "transitions", "attempts", "runs", "last_checkpoint_at"]

    def get_runs(self, job: Job) -> dict:
        current = [a for a in job.all_allocations() if a.attempt == job.attempt]
        return job_how_it_runs(job, current)

    @extend_schema_field(AttemptSerializer(many=True))
    def get_attempts(self, job: Job) -> list[dict]:
        return AttemptSerializer(job_attempts(job, list(job.transitions.all()), job.all_allocations()),
                                 many=True).data


class JobArraySerializer(serializers.ModelSerializer):
    """A job array: its spec, size, cap and how many of its tasks are in each state (``counts``, given in
    the context by array id)."""

    team = serializers.CharField(source="team.name")
    submitted_by = serializers.CharField(source="submitted_by.username")
    counts = serializers.SerializerMethodField(help_text="tasks per state (states with none left out)")

    class Meta:
        model = JobArray
        fields = ["id", "name", "team", "submitted_by", "spec", "size", "max_running", "created_at", "counts"]

    def get_counts(self, job_array: JobArray) -> dict[str, int]:
        return self.context["counts"].get(job_array.pk, {})


class NodeSerializer(serializers.ModelSerializer):
    pool = serializers.CharField(source="pool.name")
    gpus = serializers.SerializerMethodField()

    class Meta:
        model = Node
        fields = ["name", "pool", "state", "state_reason", "state_changed_at", "labels", "driver_version",
                  "cuda_version", "cpus", "memory_mb", "executor", "executor_info", "last_heartbeat_at",
                  "heartbeat_interval_s", "heartbeat_timeout_s", "gpus"]

    def get_gpus(self, node: Node) -> list[dict]:
        return [
            {"index": g.index, "uuid": g.uuid, "model": g.model.name, "memory_mb": g.memory_mb, "healthy": g.healthy,
             "health_reason": g.health_reason}
            for g in node.gpus.all() if g.present  # (the list API prefetches present GPUs only)
        ]


class NodeStateInputSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=300)


class PriorityClassSerializer(serializers.ModelSerializer):
    usable_by = serializers.SerializerMethodField(
        help_text="your teams that may submit with this class (all of them unless the class is restricted)")

    class Meta:
        model = PriorityClass
        fields = ["name", "value", "description", "preemptible", "may_preempt", "min_runtime_s", "grace_period_s",
                  "restricted", "usable_by"]

    def get_usable_by(self, pc: PriorityClass) -> list[str]:
        return [t.name for t in pc.usable_among(self.context["submit_teams"])]
