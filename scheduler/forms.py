"""The job submission form: field shapes here, every rule in the job_submit service."""

from django import forms

from scheduler.kinds import KIND_CHOICES
from scheduler.models import GpuModel, PriorityClass
from scheduler.services import jobs as job_services


class JobSubmitForm(forms.Form):
    team = forms.ChoiceField()
    name = forms.CharField(max_length=job_services.MAX_NAME)
    kind = forms.ChoiceField(choices=KIND_CHOICES, initial="training")
    command = forms.CharField(widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false"}),
                              max_length=job_services.MAX_COMMAND)
    gpus = forms.IntegerField(label="GPUs", min_value=1, max_value=job_services.MAX_GPUS, initial=1)
    gpu_fraction = forms.DecimalField(label="GPU fraction", required=False, min_value=0, max_value=1, max_digits=4,
                                      decimal_places=3,
                                      help_text="Share one GPU, e.g. 0.25 (leave blank for whole GPUs)")
    gpu_model = forms.ChoiceField(label="GPU model", required=False)
    gpu_memory_gb = forms.IntegerField(label="Min GPU memory (GB)", required=False, min_value=0,
                                       max_value=job_services.MAX_GPU_MEMORY_GB)
    cpus = forms.IntegerField(label="CPUs", required=False, min_value=0, max_value=job_services.MAX_CPUS)
    memory_gb = forms.IntegerField(label="Memory (GB)", required=False, min_value=0,
                                   max_value=job_services.MAX_MEMORY_GB)
    nodes = forms.IntegerField(label="Nodes", required=False, min_value=1, max_value=job_services.MAX_NODES,
                               help_text="Blank: one node when it fits, else the fewest")
    time_limit_minutes = forms.IntegerField(label="Time limit (minutes)", required=False, min_value=1,
                                            max_value=job_services.MAX_TIME_LIMIT_MINUTES,
                                            help_text="Blank: the kind's default")
    priority_class = forms.ChoiceField(required=False)

    COPIED_FIELDS = ("name", "kind", "command", "gpus", "gpu_fraction", "gpu_memory_gb", "cpus", "memory_gb",
                     "nodes", "time_limit_minutes")

    @classmethod
    def initial_from(cls, job) -> dict:
        """The form's initial values for "copy and edit" of ``job``."""
        initial = {f: getattr(job, f) for f in cls.COPIED_FIELDS}
        initial.update(team=job.team.name, gpu_model=job.gpu_model.name if job.gpu_model else "",
                       priority_class=job.priority_class.name)
        return initial

    def __init__(self, *args, teams=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["team"].choices = [(t.name, t.label) for t in teams]
        self.fields["gpu_model"].choices = [("", "any model")] + [
            (m.name, f"{m.name} ({m.memory_gb:g} GB)") for m in GpuModel.objects.all()
        ]
        self.fields["priority_class"].choices = [("", "the kind's default")] + [
            (p.name, f"{p.name} ({p.value})") for p in PriorityClass.objects.all()
        ]

    def submit_kwargs(self) -> dict:
        data = dict(self.cleaned_data)
        for key in ("gpu_memory_gb", "cpus", "memory_gb"):
            data[key] = data.get(key) or 0
        data["gpu_model"] = data.get("gpu_model") or None
        data["nodes"] = data.get("nodes") or None
        data["priority_class"] = data.get("priority_class") or None
        return data
