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
    gpus = forms.IntegerField(min_value=1, max_value=job_services.MAX_GPUS, initial=1)
    gpu_fraction = forms.DecimalField(required=False, min_value=0, max_value=1, max_digits=4, decimal_places=3,
                                      help_text="Share one GPU, e.g. 0.25 (leave blank for whole GPUs)")
    gpu_model = forms.ChoiceField(required=False)
    gpu_memory_gb = forms.IntegerField(required=False, min_value=0, max_value=job_services.MAX_GPU_MEMORY_GB)
    cpus = forms.IntegerField(required=False, min_value=0, max_value=job_services.MAX_CPUS)
    memory_gb = forms.IntegerField(required=False, min_value=0, max_value=job_services.MAX_MEMORY_GB)
    time_limit_minutes = forms.IntegerField(required=False, min_value=1,
                                            max_value=job_services.MAX_TIME_LIMIT_MINUTES,
                                            help_text="Blank: the kind's default")
    priority_class = forms.ChoiceField(required=False)

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
        data["priority_class"] = data.get("priority_class") or None
        return data
