"""What-if from history: the period's jobs become a trace, today's configuration with the admin's changes
is replayed through the real engine, and the outcome is compared with what happened."""

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError

from scheduler.models import Allocation, Job, JobTransition, PriorityClass, WhatIfRun
from scheduler.services.common import db_now
from scheduler.whatif import history, whatif_create, whatif_execute

pytestmark = pytest.mark.django_db


def past_job(user, team, gpu, *, submitted, waited_s, ran_s, name="hist"):
    """A finished 1-GPU job: submitted at ``submitted``, admitted ``waited_s`` later, ran ``ran_s``."""
    pc = PriorityClass.objects.get(name="training")
    job = Job.objects.create(team=team, submitted_by=user, name=name, command="true", gpus=1,
                             gpu_model=gpu.model, priority_class=pc, state="succeeded", time_limit_minutes=120)
    start = submitted + timedelta(seconds=waited_s)
    end = start + timedelta(seconds=ran_s)
    Job.objects.filter(pk=job.pk).update(created_at=submitted, admitted_at=start, started_at=start, finished_at=end,
                                         exit_code=0)
    JobTransition.objects.create(job=job, from_state="pending", to_state="admitted", at=start, cause="admitted")
    Allocation.objects.create(job=job, attempt=1, gpu=gpu, node=gpu.node, started_at=start, ended_at=end)
    return job


@pytest.fixture
def quota_bound_history(alice, cluster):
    """Vision ran 6 one-hour jobs submitted together on a 4-GPU node with a limit of 4: two waited an hour."""
    gpus = list(cluster["nodes"][0].gpus.order_by("index"))
    t0 = db_now() - timedelta(days=2)
    for i in range(6):
        past_job(alice, cluster["vision"], gpus[i % 4], submitted=t0, waited_s=0 if i < 4 else 3600, ran_s=3600,
                 name=f"h{i}")
    return t0


def test_history_becomes_a_trace_with_what_actually_happened(quota_bound_history):
    t0 = quota_bound_history
    trace, actual, skipped = history(t0 - timedelta(hours=1), t0 + timedelta(hours=3), db_now())
    assert len(trace.jobs) == 6 and skipped == {}
    assert {j.submit_time for j in trace.jobs} == {3600.0}
    assert {round(j.duration) for j in trace.jobs} == {3600}
    assert {j.gpu_models for j in trace.jobs} == {("h100-80gb",)}
    vision = actual["vision"]
    assert vision["jobs"] == 6 and vision["finished"] == 6
    assert vision["avg_wait_s"] == pytest.approx(1200.0)
    assert vision["gpu_hours"] == pytest.approx(6.0)


def test_a_bigger_limit_cuts_the_replayed_wait_of_a_quota_bound_team(admin_user, quota_bound_history, cluster):
    t0 = quota_bound_history
    from tests.factories import GpuFactory

    for i in range(4, 6):  # today the node has 6 GPUs: the limit, not capacity, is what binds
        GpuFactory(node=cluster["nodes"][0], index=i, model=cluster["h100"], uuid=f"GPU-h100-{i}")
    run = whatif_create(user=admin_user, name="raise vision", period_start=t0 - timedelta(hours=1),
                        period_end=t0 + timedelta(hours=3),
                        changes={"quotas": [{"team": "vision", "gpu_model": "h100-80gb", "limit": 6}]})
    run = whatif_execute(run.pk)
    assert run.state == WhatIfRun.DONE and run.progress == 1.0
    baseline, changed = run.result["baseline"]["vision"], run.result["changed"]["vision"]
    assert baseline["avg_wait_s"] > 1000, "as configured, two jobs wait for the limit"
    assert changed["avg_wait_s"] < 120, "with a limit of 6 all six start at once"
    assert changed["gpu_hours"] == pytest.approx(6.0, rel=0.01)
    assert run.result["summary"]["changed"]["quota_violations"] == 0
    assert run.result["summary"]["changed"]["invariant_violations"] == 0
    # The whole period's figures are kept under the simulator's names, so none is lost on the way.
    before, after = run.result["summary"]["baseline"], run.result["summary"]["changed"]
    assert all(before[k] is not None for k in ("avg_jct_s", "avg_queue_s", "p95_queue_s", "utilization"))
    assert after["avg_queue_s"] < before["avg_queue_s"] and after["avg_jct_s"] < before["avg_jct_s"]


def test_a_what_if_runs_once_even_if_asked_twice(admin_user, quota_bound_history):
    t0 = quota_bound_history
    run = whatif_create(user=admin_user, name="twice", period_start=t0 - timedelta(hours=1),
                        period_end=t0 + timedelta(hours=1))
    whatif_execute(run.pk)
    first = WhatIfRun.objects.get(pk=run.pk).finished_at
    whatif_execute(run.pk)
    assert WhatIfRun.objects.get(pk=run.pk).finished_at == first


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"period_end_delta": -1}, "period_end"),
    ({"period_start_delta": 48}, "period_start"),  # a period that has not happened yet
    ({"period_end_delta": 24 * 100}, "period_end"),
    ({"policy": "lottery"}, "policy"),
    ({"changes": {"quotas": [{"team": "nope", "gpu_model": "h100-80gb", "limit": 3}]}}, "changes.quotas[0]"),
    ({"changes": {"quotas": [{"team": "vision", "gpu_model": "h100-80gb", "guaranteed": 5, "limit": 3}]}},
     "changes.quotas.vision/h100-80gb.guaranteed"),
    ({"changes": {"pool_scale": {"train": 50}}}, "changes.pool_scale.train"),
    # The quota page's rules hold against today's values: a guarantee above today's limit of 4 ...
    ({"changes": {"quotas": [{"team": "vision", "gpu_model": "h100-80gb", "guaranteed": 20}]}},
     "changes.quotas.vision/h100-80gb.guaranteed"),
    # ... and the priority classes page's: batch has 300 already.
    ({"changes": {"priorities": {"training": 300}}}, "changes.priorities.training"),
    ({"changes": {"priorities": {"training": "high"}}}, "changes.priorities.training"),
    ({"changes": {"budget": 1}}, "changes"),
])
def test_bad_what_if_requests_name_the_field_and_save_nothing(admin_user, cluster, kwargs, field):
    now = db_now()
    delta = kwargs.pop("period_end_delta", 24)
    start = now - timedelta(days=1) + timedelta(hours=kwargs.pop("period_start_delta", 0))
    with pytest.raises(ValidationError) as info:
        whatif_create(user=admin_user, name="bad", period_start=start, period_end=start + timedelta(hours=delta),
                      **kwargs)
    assert field in info.value.message_dict
    assert not WhatIfRun.objects.exists()


def test_only_platform_admins_may_run_what_ifs(alice, cluster):
    now = db_now()
    with pytest.raises(ValidationError):
        whatif_create(user=alice, name="x", period_start=now - timedelta(days=1), period_end=now)


def test_the_what_if_pages_are_for_platform_admins_only(alice, admin_client, client, cluster):
    client.force_login(alice)
    assert client.get("/whatif/").status_code == 404
    page = admin_client.get("/whatif/")
    assert page.status_code == 200 and 'name="q:vision:h100-80gb:limit"' in page.content.decode()


def test_the_form_queues_only_what_changed_and_the_detail_page_compares(admin_client, quota_bound_history):
    t0 = quota_bound_history
    fmt = "%Y-%m-%dT%H:%M"
    response = admin_client.post("/whatif/", {
        "name": "more for vision", "period_start": (t0 - timedelta(hours=1)).strftime(fmt),
        "period_end": (t0 + timedelta(hours=1)).strftime(fmt), "policy": "rota",
        "q:vision:h100-80gb:guaranteed": "2", "q:vision:h100-80gb:limit": "6", "q:vision:h100-80gb:weight": "1",
        "q:vision:a100-40gb:guaranteed": "1", "q:vision:a100-40gb:limit": "2", "q:vision:a100-40gb:weight": "1",
        "q:nlp:h100-80gb:guaranteed": "1", "q:nlp:h100-80gb:limit": "2", "q:nlp:h100-80gb:weight": "1",
        "p:production-inference": 1000, "p:interactive": 800, "p:training": 500, "p:batch": 300,
        "s:train": "1",
    })
    run = WhatIfRun.objects.get()
    assert response.status_code == 302 and response.url == f"/whatif/{run.pk}/"
    assert run.changes == {"quotas": [{"team": "vision", "gpu_model": "h100-80gb", "limit": 6.0}],
                           "priorities": {}, "pool_scale": {}}
    whatif_execute(run.pk)
    body = admin_client.get(f"/whatif/{run.pk}/").content.decode()
    assert "whatif-figures" in body and "vision" in body and "Replay with changes" in body
    assert "Average job completion time" in body and "<td class=\"num\">—</td>" not in body.split("Per team")[0]


def test_the_form_shows_each_refused_value_beside_its_field(admin_client, quota_bound_history):
    t0 = quota_bound_history
    fmt = "%Y-%m-%dT%H:%M"
    base = {"name": "bad", "period_start": (t0 - timedelta(hours=1)).strftime(fmt),
            "period_end": (t0 + timedelta(hours=1)).strftime(fmt), "policy": "rota",
            "p:production-inference": 1000, "p:interactive": 800, "p:training": 500, "p:batch": 300, "s:train": "1"}
    body = admin_client.post("/whatif/", {**base, "s:train": "11"}).content.decode()
    assert "Nothing was replayed" in body and "Ensure this value is less than or equal to 10.0" in body
    body = admin_client.post("/whatif/", {**base, "q:vision:h100-80gb:limit": "-1"}).content.decode()
    assert "vision h100-80gb limit: Ensure this value is greater than or equal to 0" in body  # which cell
    assert '<label class="sr-only" for="id_q:vision:h100-80gb:limit">vision h100-80gb limit</label>' in body
    body = admin_client.post("/whatif/", {**base, "p:training": 300,
                                          "q:vision:h100-80gb:guaranteed": "20"}).content.decode()
    assert "value 300 is already used by batch" in body
    assert "vision/h100-80gb: guaranteed 20 is above the limit 4" in body
    assert not WhatIfRun.objects.exists()
    # A value the priority classes page accepts is one a replay accepts.
    admin_client.post("/whatif/", {**base, "p:training": 200000})
    assert WhatIfRun.objects.get().changes["priorities"] == {"training": 200000}


def test_only_gpu_time_inside_the_period_counts(quota_bound_history):
    """The two jobs that waited ran from t0+1h to t0+2h: outside a period ending at t0+1h."""
    t0 = quota_bound_history
    _, actual, _ = history(t0 - timedelta(hours=1), t0 + timedelta(hours=1), db_now())
    assert actual["vision"]["gpu_hours"] == pytest.approx(4.0)
