"""What the busiest requests cost in queries (submit, the job list, a node's heartbeat): a fixed number however
many jobs there are, so an N+1 that comes back fails here; and the job rendering that skips DRF's per-request
field building gives exactly DRF's own answer."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework import serializers
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from scheduler.api.serializers import JobDetailSerializer, JobInputSerializer, JobSerializer
from scheduler.cycle import run_cycle
from scheduler.models import Allocation, Job
from scheduler.models.jobs import PREFETCHED_ALLOCATIONS
from scheduler.services import node_cadence
from scheduler.services.jobs import job_submit
from scheduler.services.nodes import ABSENT_INDEX_BASE
from tests.factories import GpuFactory, NodeFactory

pytestmark = pytest.mark.django_db

VALID = {"name": "resnet", "command": "python train.py", "gpus": 1, "gpu_model": "h100-80gb"}


def _queries(call) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        response = call()
    assert response.status_code in (200, 201), response.content
    return [q["sql"] for q in captured.captured_queries]


def _running(user, count: int, **kw) -> list[Job]:
    jobs = [job_submit(user=user, name=f"j{i}", command="true", gpu_model="h100-80gb", **kw) for i in range(count)]
    run_cycle()
    return jobs


def test_a_submit_costs_the_same_few_queries_whatever_the_queue_holds(alice):
    client = APIClient()  # as a script submits: with the user's API token
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=alice).key}")
    client.post("/api/v1/jobs/", VALID, format="json")  # the reference rows, read once (scheduler.services.reference)
    first = _queries(lambda: client.post("/api/v1/jobs/", VALID, format="json"))
    _running(alice, 4)
    for i in range(20):
        job_submit(user=alice, name=f"queued{i}", command="true", gpu_model="h100-80gb")
    later = _queries(lambda: client.post("/api/v1/jobs/", VALID, format="json"))
    assert len(later) == len(first), later
    # the reference version (the token and its user, the user's teams, the GPU model, kinds' images, pools, budget
    # and priority class are remembered at it: one read for the authentication and the checks), then the job and
    # its pending transition (stamped by the database's clock) in one INSERT statement, atomic without a
    # transaction: no BEGIN/COMMIT, no savepoint
    assert len(later) == 2, later
    assert not any("clock_timestamp" in q for q in later), later


def test_the_job_list_costs_the_same_queries_for_2_or_40_jobs_with_their_allocations(api, alice, cluster):
    for i in range(4):  # room for 40 one-GPU jobs, every one of them running with its allocation
        node = NodeFactory(name=f"node-x{i}", pool=cluster["pool"])
        for k in range(8):
            GpuFactory(node=node, index=k, model=cluster["h100"], uuid=f"GPU-x{i}-{k}")
    cluster["vision"].quotas.update(limit=64)
    client = api(alice)
    _running(alice, 2)
    few = _queries(lambda: client.get("/api/v1/jobs/"))
    _running(alice, 38)
    assert Job.objects.filter(allocations__isnull=False).distinct().count() >= 30
    many = _queries(lambda: client.get("/api/v1/jobs/"))
    assert len(many) == len(few) <= 4, many  # count, the page, its allocations (node, GPU, model joined)


def test_a_page_of_the_queue_reads_no_allocations(api, alice, cluster):
    """Its jobs hold none (the page's row says so, scheduler.api.job_rows): the count and the page alone."""
    client = api(alice)
    _running(alice, 1)
    for i in range(5):
        job_submit(user=alice, name=f"queued{i}", command="true", gpu_model="h100-80gb", gpus=4)
    queue = _queries(lambda: client.get("/api/v1/jobs/?state=pending"))
    assert len(queue) == 2 and not any(q.startswith('SELECT "scheduler_allocation"') for q in queue), queue
    everything = _queries(lambda: client.get("/api/v1/jobs/"))
    assert len(everything) == 3, everything  # the running job's allocations read too


def test_a_heartbeat_costs_the_same_queries_for_1_or_4_jobs_on_the_node(alice, cluster, node_client):
    node = cluster["nodes"][0]
    client = node_client(node)
    idle = _queries(lambda: client.post("/api/v1/node/heartbeat/", {"seq": 1}, format="json"))
    assert not any('FROM "scheduler_allocation"' in q.split("WHERE")[0] for q in idle), "nothing held: no lookup"
    _running(alice, 1)
    one = _queries(lambda: client.post("/api/v1/node/heartbeat/", {"seq": 2}, format="json"))
    _running(alice, 3)
    four = _queries(lambda: client.post("/api/v1/node/heartbeat/", {"seq": 3}, format="json"))
    assert len(four) == len(one), four
    assert not any('FROM "scheduler_gpu"' in q for q in four), "no GPU verdicts: the node's GPUs are not read"
    # Once they are delivered (no move to write): the token with its node, pool and the reference version (the
    # kinds' images are remembered at it); the heartbeat's UPDATE, stamped by the database's clock; the held jobs
    # locked; their assignments. In a test the transaction is a savepoint (two more).
    node_cadence.nodes_in_service()  # the fleet counted now (at most every 10 s per process): not in what follows
    steady = _queries(lambda: client.post("/api/v1/node/heartbeat/", {"seq": 4}, format="json"))
    savepoint = 2
    assert len(steady) - savepoint == 4, steady
    assert 'FROM "scheduler_nodetoken"' in four[0] and "rota_reference_version" in four[0], four[0]
    assert not any(q.startswith("SELECT clock_timestamp()") or "scheduler_kindimage" in q for q in steady), steady
    wait = _queries(lambda: client.post("/api/v1/node/wait/", {"timeout_s": 0.01}, format="json"))
    assert len(wait) == 1, wait  # the long-poll's check: the token alone


def test_an_agents_heartbeat_costs_the_same_queries_for_1_or_4_gpus_reported(cluster, node_client):
    """As the agent sends it, with its GPUs' health and a round of samples: the node's GPUs read once for both,
    the samples written in one INSERT and each GPU's latest values in one UPDATE, however many GPUs."""
    from datetime import UTC, datetime, timedelta

    from scheduler.models import Gpu, GpuSample

    client = node_client()
    start = datetime.now(UTC)

    def heartbeat(seq, gpus):
        at = (start + timedelta(seconds=seq)).isoformat()
        body = {"seq": seq, "gpus": [{"uuid": f"GPU-h100-{i}", "healthy": True} for i in range(gpus)],
                "telemetry": [{"uuid": f"GPU-h100-{i}", "at": at, "util_pct": 10.0 * seq + i, "power_w": None,
                               "ecc_uncorrected": i} for i in range(gpus)]}
        return _queries(lambda: client.post("/api/v1/node/heartbeat/", body, format="json"))

    node_cadence.nodes_in_service()  # the fleet counted now (at most every 10 s per process): not in what follows
    one, four = heartbeat(2, 1), heartbeat(3, 4)
    assert len(four) == len(one), four
    assert sum('FROM "scheduler_gpu"' in q.split("WHERE")[0] for q in four) == 1, four
    assert sum(q.startswith('UPDATE "scheduler_gpu"') for q in four) == 1, four
    latest = {g.uuid: (g.util_pct, g.power_w, g.ecc_uncorrected, g.last_sample_at) for g in Gpu.objects.all()}
    for i in range(4):
        assert latest[f"GPU-h100-{i}"] == (30.0 + i, None, i, start + timedelta(seconds=3))
    assert latest["GPU-a100-0"] == (None, None, None, None)  # another node's GPU: untouched
    assert sum(q.startswith('INSERT INTO "scheduler_gpusample"') for q in four) == 1, four
    samples = GpuSample.objects.filter(gpu__uuid="GPU-h100-3").values_list("node__name", "job", "at", "util_pct",
                                                                              "power_w", "ecc_uncorrected", "xid")
    assert list(samples) == [("node-h100", None, start + timedelta(seconds=3), 33.0, None, 3, None)]
    assert GpuSample.objects.count() == 5


def test_a_gang_member_still_learns_its_peers(alice, cluster, node_client):
    """Peers are looked up only for a job with GPUs elsewhere: a job wholly on this node has none to ask for."""
    second = NodeFactory(name="node-h100-b", pool=cluster["pool"])
    for i in range(4):
        GpuFactory(node=second, index=i, model=cluster["h100"], uuid=f"GPU-h100-b{i}")
    gang = job_submit(user=alice, name="gang", command="torchrun", gpu_model="h100-80gb", gpus=4, nodes=2)
    run_cycle()
    answer = node_client(second).post("/api/v1/node/heartbeat/", {"seq": 1}, format="json").json()
    [assignment] = [a for a in answer["assignments"] if a["job_id"] == gang.pk]
    assert assignment["env"]["ROTA_NODES"] == "node-h100,node-h100-b"
    assert assignment["env"]["ROTA_NODE_RANK"] == "1" and assignment["env"]["ROTA_NUM_NODES"] == "2"


@pytest.mark.parametrize("serializer", [JobSerializer, JobDetailSerializer])
def test_the_planned_rendering_is_drfs_own_answer(alice, cluster, serializer):
    from decimal import Decimal

    _running(alice, 2)
    job_submit(user=alice, name="slice", command="x", gpu_model="h100-80gb", gpu_fraction=Decimal("0.25"),
               env={"A": "1"}, node_labels={"zone": "a"})
    job_submit(user=alice, name="any model", command="x", time_limit_minutes=5)  # no model: nulls through sources
    run_cycle()
    jobs = list(Job.objects.select_related("team", "submitted_by", "gpu_model", "priority_class", "pool")
                .prefetch_related("transitions__actor", "allocations__node", "allocations__gpu__model"))
    for job in jobs:
        setattr(job, PREFETCHED_ALLOCATIONS, list(job.allocations.all()))
    plain = serializers.ModelSerializer.to_representation  # DRF's own loop over freshly built fields
    assert any(job.all_allocations() for job in jobs) and any(job.gpu_model is None for job in jobs)
    for job in jobs:
        assert serializer(job).data == plain(serializer(job), job)
    assert serializer(jobs, many=True).data == [plain(serializer(job), job) for job in jobs]


def test_a_batch_of_job_events_costs_a_fixed_few_queries_and_little_more_per_event(alice, cluster, node_client):
    """A batch is one transaction (a savepoint here): its job rows locked in one query with the database's
    clock, their allocations read in one, its starts written in one UPDATE and one INSERT, its ends' allocations
    closed in one UPDATE and their GPU time in another, their settling moves (by the lifecycle's rules) in one
    UPDATE per distinct move and one INSERT, the ended jobs read again in one, and the notifications' check of
    the transitions recorded together in one (``transitions_wanted``). Nothing is left per event: 20 starts
    cost 5 queries, where each in its own transaction cost 5 (100, and 20 transactions); 20 exits 8 instead of
    20 x 9. One event alone costs what it cost before, an exit one query less (its move no longer reads the
    state it holds locked)."""
    for i in range(3):  # room for 26 one-GPU jobs
        node = NodeFactory(name=f"node-x{i}", pool=cluster["pool"])
        for k in range(8):
            GpuFactory(node=node, index=k, model=cluster["h100"], uuid=f"GPU-x{i}-{k}")
    cluster["vision"].quotas.update(limit=64)
    jobs = _running(alice, 26)
    Allocation.objects.update(node=cluster["nodes"][0])  # all reported by one node
    client = node_client(cluster["nodes"][0])

    def batch(chosen, **event):
        body = {"events": [{"job_id": job.pk, "attempt": 1, **event} for job in chosen]}
        return len(_queries(lambda: client.post("/api/v1/node/events/", body, format="json")))

    auth, savepoint = 1, 2  # the node's token; the batch's transaction, a savepoint in a test
    groups = [jobs[:1], jobs[1:6], jobs[6:26]]
    starts = [batch(chosen, type="started") - auth - savepoint for chosen in groups]
    assert starts == [5, 5, 5], starts
    exits = [batch(chosen, type="exited", exit_code=0) - auth - savepoint for chosen in groups]
    assert exits == [8, 8, 8], exits
    assert Job.objects.filter(state="succeeded").count() == 26


def _register_report(gpus: list[dict]) -> dict:
    return {"hostname": "node-r8", "gpu_backend": "nvml", "driver_version": "550.54.15", "cuda_version": "12.4",
            "cpus": 64, "memory_mb": 512000, "gpus": gpus}


EIGHT_H100 = [{"index": i, "uuid": f"GPU-r8-{i}", "model": "h100-80gb", "memory_mb": 81559} for i in range(8)]


def test_a_node_registering_again_unchanged_costs_a_fixed_few_queries_and_writes_no_gpu(cluster, node_client):
    """An agent restarting on the same host (the usual register): the GPU model read once for all its GPUs, and
    none of its GPU rows written, since nothing about them changed."""
    from scheduler.models import Gpu

    node = NodeFactory(name="node-r8", pool=cluster["pool"])
    client = node_client(node)
    assert client.post("/api/v1/node/register/", _register_report(EIGHT_H100), format="json").status_code == 200
    node_cadence.nodes_in_service()  # the fleet counted now (at most every 10 s per process): not in what follows
    again = _queries(lambda: client.post("/api/v1/node/register/", _register_report(EIGHT_H100), format="json"))
    assert not any(q.startswith('UPDATE "scheduler_gpu"') for q in again), again
    assert sum('FROM "scheduler_gpumodel"' in q for q in again) == 1, again
    # the token with its node and pool; the UUIDs' owners; the transaction (a savepoint here); the clock; the node
    # locked; its GPUs; the one GPU model; the node's UPDATE (an 8-GPU node cost 16 more: a model and an UPDATE a GPU)
    savepoint = 2
    assert len(again) - savepoint == 7, again
    gpus = Gpu.objects.filter(node=node).order_by("index")
    assert [(g.index, g.uuid, g.model.name, g.memory_mb, g.present) for g in gpus] == [
        (i, f"GPU-r8-{i}", "h100-80gb", 81559, True) for i in range(8)]


def test_a_first_register_inserts_the_nodes_gpus_in_one_statement(cluster, node_client):
    """A fleet registering for the first time (a new site, a load test): each node's eight GPUs are written by one
    INSERT, not eight round trips, each waited for while the fleet's other registers queue."""
    from scheduler.models import Gpu

    node = NodeFactory(name="node-r8", pool=cluster["pool"])
    client = node_client(node)
    queries = _queries(lambda: client.post("/api/v1/node/register/", _register_report(EIGHT_H100), format="json"))
    inserts = [q for q in queries if q.startswith('INSERT INTO "scheduler_gpu"')]
    assert len(inserts) == 1 and inserts[0].count("GPU-r8-") == 8, queries
    gpus = Gpu.objects.filter(node=node).order_by("index")
    assert [(g.index, g.uuid, g.model.name, g.memory_mb, g.present) for g in gpus] == [
        (i, f"GPU-r8-{i}", "h100-80gb", 81559, True) for i in range(8)]


def test_a_register_that_changes_a_gpu_still_writes_it_and_creates_a_new_model_once(cluster, node_client):
    """Only the GPUs that changed are written: one whose memory differs, and three now of a model never seen,
    which is created once for the three and read once."""
    from scheduler.models import Gpu, GpuModel

    node = NodeFactory(name="node-r8", pool=cluster["pool"])
    client = node_client(node)
    client.post("/api/v1/node/register/", _register_report(EIGHT_H100), format="json")
    changed = [dict(item) for item in EIGHT_H100]
    changed[1]["memory_mb"] = 81000
    for item in changed[5:]:
        item.update(model="b200-180gb", memory_mb=183359)
    queries = _queries(lambda: client.post("/api/v1/node/register/", _register_report(changed), format="json"))
    updates = [q for q in queries if q.startswith('UPDATE "scheduler_gpu"')]
    assert len(updates) == 4, updates
    assert sum('FROM "scheduler_gpumodel"' in q for q in queries) == 2, queries  # h100 and b200, once each
    assert sum(q.startswith('INSERT INTO "scheduler_gpumodel"') for q in queries) == 1, queries
    b200 = GpuModel.objects.get(name="b200-180gb")
    assert (b200.memory_mb, b200.display_name, b200.is_mig_profile) == (183359, "b200-180gb", False)
    gpus = Gpu.objects.filter(node=node).order_by("index")
    assert [(g.index, g.uuid, g.model.name, g.memory_mb, g.present) for g in gpus] == [
        (i, f"GPU-r8-{i}", item["model"], item["memory_mb"], True) for i, item in enumerate(changed)]


def test_a_gone_gpu_is_written_once_and_not_again_while_it_stays_gone(cluster, node_client):
    """GPU 7 gone, GPU 6 now at index 7 and a new device at 6: the gone one moves past the reportable indexes,
    absent. The same report again writes none of the node's GPUs."""
    from scheduler.models import Gpu

    node = NodeFactory(name="node-r8", pool=cluster["pool"])
    client = node_client(node)
    client.post("/api/v1/node/register/", _register_report(EIGHT_H100), format="json")
    moved = EIGHT_H100[:6] + [{**EIGHT_H100[6], "index": 7}, {**EIGHT_H100[6], "uuid": "GPU-r8-new"}]
    first = _queries(lambda: client.post("/api/v1/node/register/", _register_report(moved), format="json"))
    assert sum(q.startswith('UPDATE "scheduler_gpu"') for q in first) == 4, first  # 2 parked, then 2 placed
    again = _queries(lambda: client.post("/api/v1/node/register/", _register_report(moved), format="json"))
    assert not any(q.startswith(('UPDATE "scheduler_gpu"', 'INSERT INTO "scheduler_gpu"')) for q in again), again
    rows = Gpu.objects.filter(node=node).order_by("index").values_list("index", "uuid", "present")
    assert list(rows) == [*((i, f"GPU-r8-{i}", True) for i in range(6)), (6, "GPU-r8-new", True),
                          (7, "GPU-r8-6", True), (ABSENT_INDEX_BASE, "GPU-r8-7", False)]


JOB_REQUESTS = [  # valid, every kind of bad field, unknown fields, and a body that is not an object
    VALID, {**VALID, "gpu_fraction": "0.25", "env": {"A": "1"}, "node_labels": {"zone": "a"}, "retry_on": ["failed"],
            "max_retries": 2, "kind": "inference", "preemptible": True},
    {"name": "", "gpus": 0, "kind": "nope", "gpu_fraction": "1.5", "env": {"A": 1}, "retry_on": ["sometimes"]},
    {**VALID, "gpu": 4, "colour": "red"}, {"name": "x" * 500, "cpus": -1, "time_limit_minutes": "soon"},
    ["not", "an", "object"], {},
]


def _checked(serializer) -> tuple:
    valid = serializer.is_valid()
    return valid, dict(serializer.validated_data) if valid else serializer.errors


@pytest.mark.parametrize("body", JOB_REQUESTS)
def test_the_job_request_checked_by_shared_fields_gets_drfs_own_answer(body):
    """The input serializer's fields are bound once per class (portal.api.SharedFields); a serializer given a
    context builds its own, the ordinary way: both give the same data or the same errors."""
    shared, own = JobInputSerializer(data=body), JobInputSerializer(data=body, context={"own": True})
    assert shared.fields is JobInputSerializer(data=VALID).fields  # built once, not per request
    assert own.fields is not shared.fields and own.fields is own.fields
    assert _checked(shared) == _checked(own)


def test_shared_fields_keep_each_requests_answer_apart_across_threads():
    from concurrent.futures import ThreadPoolExecutor

    expected = [_checked(JobInputSerializer(data=body, context={"own": True})) for body in JOB_REQUESTS]

    def check_all(_):
        return [_checked(JobInputSerializer(data=body)) for body in JOB_REQUESTS for _ in range(20)]

    with ThreadPoolExecutor(8) as pool:
        for answers in pool.map(check_all, range(16)):
            assert answers == [e for e in expected for _ in range(20)]


def test_a_submitted_job_has_its_pending_transition_from_the_same_statement(alice):
    from scheduler.services.common import db_now

    before = db_now()
    job = job_submit(user=alice, name="one", command="true", gpu_model="h100-80gb")
    [transition] = Job.objects.get(pk=job.pk).transitions.all()
    assert (transition.from_state, transition.to_state, transition.cause, transition.actor) == (
        "", "pending", "submitted", alice)
    assert before <= transition.at <= db_now()
    assert Job.objects.get(pk=job.pk).created_at == job.created_at  # the object is the row it saved


def _jobs_of_every_shape(alice, cluster) -> list[Job]:
    """Pending, running with allocations, a second attempt whose first allocations are not shown, a share of a
    GPU, no model, a pool, a pending reason, labels and retries, an array task, and jobs with service ports (a
    running notebook, a running inference service, a stopped one): what a page of the list can hold."""
    from decimal import Decimal

    from scheduler.services.arrays import array_submit

    _running(alice, 3)
    job_submit(user=alice, name="slice", command="x", gpu_model="h100-80gb", gpu_fraction=Decimal("0.25"),
               node_labels={"zone": "a"}, max_retries=2, retry_on=["failed"])
    job_submit(user=alice, name="any model", command="x", time_limit_minutes=5, pool=cluster["pool"].name)
    array_submit(user=alice, name="sweep", command="x", gpu_model="h100-80gb", array="0-1")
    run_cycle()
    jobs = list(Job.objects.order_by("id"))
    running = [j for j in jobs if j.allocations.exists()]
    assert len(running) >= 4 and any(j.state == "pending" for j in jobs)
    Job.objects.filter(pk=running[0].pk).update(attempt=2)  # its allocations are of attempt 1: not shown
    Job.objects.filter(pk=running[1].pk).update(kind="notebook", service_port=8888, state="running")
    Job.objects.filter(pk=running[2].pk).update(kind="inference", service_port=9000, state="running")
    Job.objects.filter(pk=running[3].pk).update(state="succeeded")  # ended: its allocations still shown
    Job.objects.filter(pk=jobs[-1].pk).update(service_port=7000)  # pending: a port, no address yet
    Job.objects.filter(pk=jobs[-2].pk).update(pending_reason_code="quota", pending_reason_message="over quota",
                                              pending_reason_details={"limit": 8, "used": [1, 2]})
    return list(Job.objects.order_by("-id"))


def test_the_job_lists_rows_are_the_serializers_answer_for_jobs_of_every_shape(alice, cluster):
    """The list renders rows, not instances (scheduler.api.job_rows): for each kind of job it gives exactly
    JobSerializer's answer for the job read as an instance, in the same order."""
    from scheduler.api.job_rows import job_answers
    from scheduler.selectors import JOB_ROW_RELATED

    _jobs_of_every_shape(alice, cluster)
    jobs = list(Job.objects.select_related(*JOB_ROW_RELATED).prefetch_related(
        "allocations__node", "allocations__gpu__model").order_by("-id"))
    for job in jobs:
        setattr(job, PREFETCHED_ALLOCATIONS, list(job.allocations.all()))
    expected = JobSerializer(jobs, many=True).data
    assert any(row["allocations"] for row in expected) and any(row["pending_reason"] for row in expected)
    assert any(row["connect_url"] for row in expected) and any(row["notebook_url"] for row in expected)
    assert any(row["gpu_fraction"] for row in expected) and any(row["array_id"] for row in expected)
    assert any(row["gpu_model"] is None for row in expected) and any(row["pool"] for row in expected)
    answers = job_answers(Job.objects.values("pk"))
    assert answers == expected and [list(row) for row in answers] == [list(row) for row in expected]  # key order too
    assert job_answers(Job.objects.values("pk")[:0]) == job_answers(Job.objects.none().values("pk")) == []


def test_the_job_list_answers_the_same_through_the_api(api, alice, cluster):
    """The whole answer, paginated and filtered, is the serializer's for the jobs it holds."""
    from scheduler.selectors import JOB_ROW_RELATED

    jobs = _jobs_of_every_shape(alice, cluster)
    body = api(alice).get("/api/v1/jobs/", {"limit": 4, "offset": 1}).json()
    shown = list(Job.objects.select_related(*JOB_ROW_RELATED).filter(pk__in=[j.pk for j in jobs[1:5]])
                 .order_by("-id"))
    for job in shown:
        setattr(job, PREFETCHED_ALLOCATIONS, list(job.allocations.all()))
    assert body["count"] == len(jobs) and body["results"] == JobSerializer(shown, many=True).data
