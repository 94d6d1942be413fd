"""The job submission form: field shapes here, every rule in the job_submit service. Fields are grouped
(basics, resources, the kind's own settings, scheduling) and the GPU model choices are limited to the
models in pools the chosen team may use."""

from decimal import Decimal

from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator

from scheduler.images import image_resolve
from scheduler.kinds import KIND_CHOICES, KINDS
from scheduler.models import Gpu, Pool, PriorityClass
from scheduler.retries import MAX_BACKOFF_S, MAX_RETRIES
from scheduler.services import jobs as job_services
from scheduler.services.arrays import MAX_ARRAY_SPEC, array_spec_parse
from scheduler.services.dependencies import MAX_DEPENDENCY
from scheduler.services.inference import MAX_REPLICAS
from scheduler.services.runtime import kind_images

# Which kinds show a kind-specific field (the others hide it; the server ignores it for them).
KIND_FIELDS = {"nodes": ("training",), "idle_timeout_minutes": ("notebook",), "replicas": ("inference",),
               "health_path": ("inference",)}
GROUPS = [
    ("Basics", ("team", "name", "kind", "command", "image")),
    ("Resources", ("gpus", "gpu_fraction", "gpu_model", "gpu_memory_gb", "cpus", "memory_gb", "nodes")),
    ("Placement constraints", ("pool", "node_labels", "min_driver_version")),
    ("Service and interactive settings", ("replicas", "health_path", "idle_timeout_minutes")),
    ("Scheduling", ("time_limit_minutes", "priority_class", "preemptible", "array", "dependency")),
    ("Retries", ("max_retries", "retry_on", "retry_backoff_s")),
]
# Fields a saved template keeps (the team is the template's own).
TEMPLATE_FIELDS = tuple(f for _, names in GROUPS for f in names if f != "team")
PREEMPTIBLE_CHOICES = [("", "the kind's default"), ("yes", "yes: may be preempted"), ("no", "no")]


KIND_INFO = {
    "training": ("Training", "Single node or a multi-node gang; ends when the script ends. Checkpoint: it may be "
                             "preempted and requeued."),
    "inference": ("Inference service", "Replicas that run until stopped, restarted on failure; served on a port "
                                       "the platform assigns."),
    "notebook": ("Notebook", "Interactive: a connect URL once running; stopped when idle past its timeout."),
    "data-processing": ("Data processing", "Batch preprocessing or ETL on GPUs; preemptible, runs when capacity "
                                           "is idle."),
    "evaluation": ("Evaluation", "Benchmarks and model evaluation runs; batch priority."),
    "agent": ("Agent task", "Short autonomous agent runs with a tight time limit; batch priority."),
}


def kind_cards() -> list[dict]:
    """Each kind with its title, what it is for and its defaults (from ``scheduler.kinds``, and the image a
    platform admin set for it: see ``scheduler.services.runtime``)."""
    images = kind_images()
    return [
        {"kind": kind, "title": KIND_INFO.get(kind, (kind, ""))[0], "blurb": KIND_INFO.get(kind, ("", ""))[1],
         "priority_class": d.priority_class, "preemptible": d.preemptible,
         "time_limit_minutes": d.time_limit_minutes, "idle_timeout_minutes": d.idle_timeout_minutes,
         "restart_on_failure": d.restart_on_failure,
         "image": image_resolve("", kind, images, settings.ROTA_DEFAULT_IMAGE)}
        for kind, d in KINDS.items()
    ]


def team_offers(teams) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """For each team, the GPU models present in the pools it may use and those pools (two queries)."""
    names = {t.pk: t.name for t in teams}
    models: dict[str, set[str]] = {name: set() for name in names.values()}
    pools: dict[str, set[str]] = {name: set() for name in names.values()}
    for team_id, model in Gpu.objects.filter(present=True, node__pool__teams__in=list(names)).values_list(
            "node__pool__teams", "model__name").distinct():
        if team_id in names:
            models[names[team_id]].add(model)
    for team_id, pool in Pool.objects.filter(teams__in=list(names)).values_list("teams", "name"):
        if team_id in names:
            pools[names[team_id]].add(pool)
    return ({t: sorted(m) for t, m in models.items()}, {t: sorted(p) for t, p in pools.items()})


def parse_labels(text: str) -> dict[str, str]:
    """``key=value, key=value`` as a dict; ValidationError names a malformed pair."""
    labels = {}
    for pair in filter(None, (p.strip() for p in (text or "").split(","))):
        key, sep, value = pair.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise forms.ValidationError(f"write labels as key=value, separated by commas; got {pair!r}")
        labels[key.strip()] = value.strip()
    return labels


def format_labels(labels: dict | None) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted((labels or {}).items()))


def _by_option(offers: dict[str, list[str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for team, values in offers.items():
        for v in values:
            out.setdefault(v, []).append(team)
    return out


class TeamOptionSelect(forms.Select):
    """A select whose options say which teams may use each one (``data-teams``), so the page can offer
    only the chosen team's GPU models, pools and priority classes."""

    def __init__(self, *args, teams_of: dict[str, list[str]] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.teams_of = teams_of or {}

    def create_option(self, name, value, label, selected, index, subindex=None, attrs=None):
        option = super().create_option(name, value, label, selected, index, subindex, attrs)
        if value:
            option["attrs"]["data-teams"] = " ".join(self.teams_of.get(str(value), []))
        return option


class OneRuleDecimalField(forms.DecimalField):
    """A decimal field whose validators share one message (the fraction's rule): said once, not once per
    validator that fails (99999 broke both the maximum and the digits)."""

    def run_validators(self, value):
        try:
            super().run_validators(value)
        except forms.ValidationError as error:
            raise forms.ValidationError(list(dict.fromkeys(error.messages))) from None


class JobSubmitForm(forms.Form):
    team = forms.ChoiceField()
    name = forms.CharField(max_length=job_services.MAX_NAME)
    kind = forms.ChoiceField(choices=KIND_CHOICES, initial="training")
    command = forms.CharField(widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false"}), required=False,
                              max_length=job_services.MAX_COMMAND,
                              help_text="A notebook left blank runs JupyterLab, opened from its page")
    image = forms.CharField(label="Container image", required=False, max_length=300,
                            help_text="Registry first, e.g. localhost/rota/python:3.11 or "
                                      "nvcr.io/nvidia/pytorch:24.05-py3; blank: the kind's default image. Each "
                                      "pool runs only the images a platform admin allows there")
    gpus = forms.IntegerField(label="GPUs", min_value=1, max_value=job_services.MAX_GPUS, initial=1)
    gpu_fraction = OneRuleDecimalField(label="GPU fraction", required=False, min_value=0, max_value=1, max_digits=4,
                                      decimal_places=3, error_messages=job_services.FRACTION_ERRORS,
                                      help_text="Share one GPU, e.g. 0.25 (leave blank for whole GPUs)")
    gpu_model = forms.ChoiceField(label="GPU model", required=False,
                                  help_text="Only models in pools your team may use")
    gpu_memory_gb = forms.IntegerField(label="Min GPU memory (GB)", required=False, min_value=0,
                                       max_value=job_services.MAX_GPU_MEMORY_GB)
    cpus = forms.IntegerField(label="CPUs", required=False, min_value=0, max_value=job_services.MAX_CPUS)
    memory_gb = forms.IntegerField(label="Memory (GB)", required=False, min_value=0,
                                   max_value=job_services.MAX_MEMORY_GB)
    pool = forms.ChoiceField(label="Pool", required=False, help_text="Blank: any pool your team may use")
    node_labels = forms.CharField(label="Node labels", required=False, max_length=500,
                                  help_text="Nodes must carry these, e.g. network=ib, storage=nvme")
    min_driver_version = forms.CharField(label="Min driver version", required=False, max_length=40,
                                         help_text="e.g. 550.54")
    nodes = forms.IntegerField(label="Nodes", required=False, min_value=1, max_value=job_services.MAX_NODES,
                               help_text="Multi-node training: GPUs are split evenly over the nodes. "
                                         "Blank: one node when it fits, else the fewest")
    replicas = forms.IntegerField(label="Replicas", required=False, min_value=1, max_value=MAX_REPLICAS, initial=1,
                                  help_text="Each replica is its own job (name-1, name-2, …), restarted on failure")
    health_path = forms.CharField(label="Health path", required=False, max_length=200, initial="/health",
                                  validators=[RegexValidator(r"\A/[^\s]*\Z", "must be a path starting with /")],
                                  help_text="Its node probes GET <path> on the port the platform assigns "
                                            "($ROTA_PORT); only healthy replicas get traffic, failing ones restart")
    idle_timeout_minutes = forms.IntegerField(label="Idle timeout (minutes)", required=False, min_value=5,
                                              max_value=job_services.MAX_TIME_LIMIT_MINUTES,
                                              help_text="A notebook left idle this long is stopped")
    time_limit_minutes = forms.IntegerField(label="Time limit (minutes)", required=False, min_value=1,
                                            max_value=job_services.MAX_TIME_LIMIT_MINUTES,
                                            help_text="Blank: the kind's default")
    priority_class = forms.ChoiceField(required=False)
    preemptible = forms.ChoiceField(choices=PREEMPTIBLE_CHOICES, required=False)
    array = forms.CharField(label="Job array", required=False, max_length=MAX_ARRAY_SPEC,
                            help_text='One task per index, e.g. 0-99 or 1,3,5; add %8 to run at most 8 at once. '
                                      "Each task gets $ROTA_ARRAY_INDEX")
    max_retries = forms.IntegerField(label="Retries", required=False, min_value=0, max_value=MAX_RETRIES,
                                     help_text="Queue it again at most this many times after the ends ticked below")
    retry_on = forms.MultipleChoiceField(
        label="Retry after", required=False, widget=forms.CheckboxSelectMultiple,
        choices=[("node-lost", "its node was lost (retried anyway, up to the platform's limit)"),
                 ("failed", "it failed (non-zero exit or killed)"), ("start-failed", "it could not start"),
                 ("timed-out", "it reached its time limit")])
    retry_backoff_s = forms.IntegerField(label="Retry backoff (seconds)", required=False, min_value=0,
                                         max_value=MAX_BACKOFF_S, help_text="Before the first retry; doubles each time")
    dependency = forms.CharField(label="Start after", required=False, max_length=MAX_DEPENDENCY,
                                 help_text="Slurm's syntax: afterok:12 (after job 12 succeeds), afternotok:12, "
                                           "afterany:12:13; 7_* is every task of array 7")

    COPIED_FIELDS = ("name", "kind", "command", "image", "gpus", "gpu_fraction", "gpu_memory_gb", "cpus",
                     "memory_gb", "nodes", "time_limit_minutes", "idle_timeout_minutes", "dependency",
                     "max_retries", "retry_on", "retry_backoff_s")

    @classmethod
    def initial_from(cls, job) -> dict:
        """The form's initial values for "copy and edit" of ``job``."""
        initial = {f: getattr(job, f) for f in cls.COPIED_FIELDS}
        initial.update(team=job.team.name, gpu_model=job.gpu_model.name if job.gpu_model else "",
                       priority_class=job.priority_class.name, preemptible="yes" if job.preemptible else "no",
                       health_path=(job.env or {}).get("ROTA_HEALTH_PATH", ""),
                       pool=job.pool.name if job.pool else "", node_labels=format_labels(job.node_labels),
                       min_driver_version=job.min_driver_version)
        return initial

    @staticmethod
    def initial_for_kind(kind: str) -> dict:
        """Presets of a kind card: the kind and its defaults, shown in the fields they fill."""
        if kind not in KINDS:
            return {}
        d = KINDS[kind]
        return {"kind": kind, "priority_class": d.priority_class, "time_limit_minutes": d.time_limit_minutes,
                "preemptible": "yes" if d.preemptible else "no", "idle_timeout_minutes": d.idle_timeout_minutes}

    @staticmethod
    def initial_from_template(template) -> dict:
        """The form's initial values from a saved template (unknown keys are ignored)."""
        values = {k: v for k, v in (template.fields or {}).items() if k in TEMPLATE_FIELDS}
        return {**values, "kind": template.kind, "team": template.team.name}

    def __init__(self, *args, teams=(), **kwargs):
        super().__init__(*args, **kwargs)
        teams = list(teams)
        self.fields["team"].choices = [(t.name, t.label) for t in teams]
        self.models_by_team, self.pools_by_team = team_offers(teams)
        for field, offers, blank in (("gpu_model", self.models_by_team, "any model"),
                                     ("pool", self.pools_by_team, "any pool")):
            teams_of = _by_option(offers)
            choices = [("", blank)] + [(v, v) for v in sorted(teams_of)]
            self.fields[field].choices = choices
            self.fields[field].widget = TeamOptionSelect(teams_of=teams_of, choices=choices)
        # Restricted classes are offered to the teams granted them only (the page hides the rest per team).
        classes = list(PriorityClass.objects.prefetch_related("teams"))
        self.class_teams = {p.name: [t.name for t in p.usable_among(teams)] for p in classes}
        choices = [("", "the kind's default")] + [(p.name, f"{p.name} ({p.value})") for p in classes]
        self.fields["priority_class"].choices = choices
        self.fields["priority_class"].widget = TeamOptionSelect(teams_of=self.class_teams, choices=choices)
        for name, kinds in KIND_FIELDS.items():
            self.fields[name].widget.attrs["data-kinds"] = " ".join(kinds)

    def groups(self):
        """The fieldsets for the template: (legend, [(bound field, kinds that show it or "")])."""
        return [(legend, [(self[name], " ".join(KIND_FIELDS.get(name, ()))) for name in names])
                for legend, names in GROUPS]

    @classmethod
    def kind_presets(cls) -> dict[str, dict]:
        """What choosing each kind fills in (for the page's script)."""
        return {kind: cls.initial_for_kind(kind) for kind in KINDS}

    def clean_array(self) -> str:
        text = (self.cleaned_data.get("array") or "").strip()
        if text:
            try:
                array_spec_parse(text)
            except ValidationError as exc:
                raise forms.ValidationError(exc.message_dict["array"]) from None
        return text

    def clean_node_labels(self) -> dict[str, str]:
        return parse_labels(self.cleaned_data.get("node_labels", ""))

    def clean(self):
        data = super().clean()
        team, model, pool = data.get("team"), data.get("gpu_model"), data.get("pool")
        if not (data.get("command") or "").strip() and not KINDS.get(data.get("kind"), KINDS["training"]).command:
            # (a notebook's blank command runs JupyterLab); coded "required" like any missing field
            self.add_error("command", ValidationError("This field is required.", code="required"))
        if team and model and model not in self.models_by_team.get(team, []):
            allowed = ", ".join(self.models_by_team.get(team, [])) or "none"
            self.add_error("gpu_model", f"{model} is in no pool team {team} may use; allowed: {allowed}")
        if team and pool and pool not in self.pools_by_team.get(team, []):
            allowed = ", ".join(self.pools_by_team.get(team, [])) or "none"
            self.add_error("pool", f"team {team} may not use pool {pool}; allowed: {allowed}")
        return data

    def replica_count(self) -> int:
        if self.cleaned_data.get("kind") != "inference":
            return 1
        return self.cleaned_data.get("replicas") or 1

    def submit_kwargs(self) -> dict:
        """Keyword arguments of ``job_submit`` / ``job_quote`` (fields of other kinds dropped)."""
        data = {k: v for k, v in self.cleaned_data.items() if k not in ("replicas", "health_path", "array")}
        kind = data.get("kind")
        for key in ("gpu_memory_gb", "cpus", "memory_gb"):
            data[key] = data.get(key) or 0
        data["gpu_model"] = data.get("gpu_model") or None
        data["nodes"] = (data.get("nodes") or None) if kind in KIND_FIELDS["nodes"] else None
        if kind not in KIND_FIELDS["idle_timeout_minutes"]:
            data["idle_timeout_minutes"] = None
        data["priority_class"] = data.get("priority_class") or None
        data["preemptible"] = {"yes": True, "no": False}.get(data.get("preemptible") or "")
        data["image"] = data.get("image") or ""
        data["pool"] = data.get("pool") or None
        data["node_labels"] = data.get("node_labels") or {}
        data["min_driver_version"] = (data.get("min_driver_version") or "").strip()
        data["dependency"] = (data.get("dependency") or "").strip()
        data["max_retries"] = data.get("max_retries") or 0
        data["retry_on"] = list(data.get("retry_on") or [])
        if data.get("retry_backoff_s") is None:
            data["retry_backoff_s"] = job_services.DEFAULT_RETRY_BACKOFF_S
        if kind == "inference" and self.cleaned_data.get("health_path"):
            data["env"] = {"ROTA_HEALTH_PATH": self.cleaned_data["health_path"]}
        return data

    def template_fields(self) -> dict:
        """The values a saved template keeps: JSON-safe, blanks dropped, no team, and none of the fields
        its kind hides (an inference health path on a training template)."""
        out = {}
        kind = self.cleaned_data.get("kind")
        for name in TEMPLATE_FIELDS:
            if name in KIND_FIELDS and kind not in KIND_FIELDS[name]:
                continue
            value = self.cleaned_data.get(name)
            if name == "node_labels":
                value = format_labels(value)
            if value in (None, ""):
                continue
            out[name] = format(value, "f") if isinstance(value, Decimal) else value
        return out


def template_value_errors(team, values: dict, kind: str | None = None,
                          form: JobSubmitForm | None = None) -> dict[str, str]:
    """Per field, why a template's saved value would not pass the submit form for ``team`` (the same
    ranges, lengths and choices a submitted job gets, and a priority class the team may use: the one
    saved, else ``kind``'s default); empty when every value would. ``form``: the team's submit form, when
    checking several templates of it."""
    form = form or JobSubmitForm(teams=[team])
    errors = {}
    for key, value in values.items():
        field = form.fields.get(key)
        if field is None or key == "team":
            continue
        try:
            cleaned = field.clean(value)
            if key == "node_labels":
                parse_labels(cleaned)
        except forms.ValidationError as exc:
            errors[key] = " ".join(exc.messages)
    pc_name = values.get("priority_class") or (KINDS[kind].priority_class if kind in KINDS else "")
    if "priority_class" not in errors and team.name not in form.class_teams.get(pc_name, [team.name]):
        default_of = None if values.get("priority_class") else kind
        pc = PriorityClass.objects.get(name=pc_name)
        errors["priority_class"] = job_services.priority_class_refusal(pc, team, default_of=default_of)
    return errors
