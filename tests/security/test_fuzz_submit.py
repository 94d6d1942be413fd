"""Hypothesis on job submission: random inputs to the service, the form and the submit page never raise
anything but a validation error (never a 500), and never save a half-valid job: either nothing is saved,
or one pending job that passes every model and database check, with its submit transition."""

from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.audit import audit
from scheduler.kinds import KINDS
from scheduler.models import Job, JobTransition
from scheduler.services.jobs import job_submit

pytestmark = pytest.mark.django_db

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True,
                database=None)

names = st.one_of(st.text(max_size=120), st.sampled_from(["train", " ", "x" * 101]))
ints = st.one_of(st.none(), st.integers(min_value=-10, max_value=5000), st.sampled_from([0, 1, 2, 1024, 1025]))
kinds = st.one_of(st.sampled_from(list(KINDS)), st.text(max_size=12))
fractions = st.one_of(st.none(), st.decimals(allow_nan=False, allow_infinity=False, places=4,
                                             min_value=Decimal("-1"), max_value=Decimal("2")),
                      st.floats(min_value=-1, max_value=2, allow_nan=False))
models = st.one_of(st.none(), st.sampled_from(["h100-80gb", "a100-40gb", "nope", ""]))
string_maps = st.one_of(st.none(), st.dictionaries(st.text(max_size=8), st.one_of(st.text(max_size=8),
                                                                                   st.integers()), max_size=3))
requests = st.fixed_dictionaries({}, optional={
    "team": st.sampled_from(["vision", "nlp", "", "nope"]), "name": names, "command": names, "kind": kinds,
    "gpus": ints, "gpu_fraction": fractions, "gpu_model": models, "gpu_memory_gb": ints, "cpus": ints,
    "memory_gb": ints, "nodes": ints, "pool": st.sampled_from([None, "train", "nope"]),
    "node_labels": string_maps, "env": string_maps, "time_limit_minutes": ints, "idle_timeout_minutes": ints,
    "priority_class": st.sampled_from([None, "training", "batch", "nope"]), "preemptible": st.sampled_from(
        [None, True, False]), "min_driver_version": st.text(max_size=50),
})


def assert_whole(job: Job) -> None:
    job.full_clean()
    assert job.state == "pending"
    assert list(JobTransition.objects.filter(job=job).values_list("from_state", "to_state")) == [("", "pending")]


@FUZZ
@given(request=requests)
def test_the_service_saves_a_whole_job_or_nothing(alice, request):
    before = Job.objects.count()
    try:
        job = job_submit(user=alice, **{"name": "n", "command": "c", **request})
    except ValidationError:
        assert Job.objects.count() == before
        return
    assert Job.objects.count() == before + 1
    assert_whole(Job.objects.get(pk=job.pk))


form_values = st.one_of(st.text(max_size=20), st.integers(min_value=-5, max_value=3000).map(str),
                        st.sampled_from(["", "0.5", "1e9", "NaN", "-0", "h100-80gb", "training", "vision", "{}"]))
FORM_FIELDS = ["team", "name", "kind", "command", "image", "gpus", "gpu_fraction", "gpu_model", "gpu_memory_gb",
               "cpus", "memory_gb", "pool", "node_labels", "min_driver_version", "nodes", "replicas",
               "health_path", "idle_timeout_minutes", "time_limit_minutes", "priority_class", "preemptible"]


@FUZZ
@given(data=st.dictionaries(st.sampled_from(FORM_FIELDS), form_values))
def test_the_submit_page_never_errors_and_saves_whole_jobs(alice, client, data):
    client.force_login(alice)
    before = set(Job.objects.values_list("pk", flat=True))
    response = client.post("/jobs/new/", {"team": "vision", "name": "n", "command": "c", **data})
    assert response.status_code in (200, 302), response.status_code
    new = Job.objects.exclude(pk__in=before)
    if response.status_code == 200:
        assert not new.exists()
    for job in new:
        assert_whole(job)


def test_after_the_fuzzing_the_auditor_finds_nothing(alice):
    job_submit(user=alice, name="n", command="c")
    assert audit() == []
