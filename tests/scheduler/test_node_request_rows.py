"""The node API's cheaper request path (tests/scheduler/test_request_costs.py counts its queries) gives what the
ORM's own reads gave: the token's node and pool, the heartbeat's allocations with their jobs, the validation of
the node's reports; and a heartbeat stamps its write, its moves and its answer with one database clock."""

from decimal import Decimal

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from rest_framework.test import APIClient

from portal.cache import RedisCache
from portal.dbrows import CompiledQuery
from scheduler.api.node import HeartbeatSerializer, NodeTokenAuthentication, RegisterSerializer
from scheduler.cycle import run_cycle
from scheduler.models import Allocation, Job, KindImage, Node, NodeToken
from scheduler.models.jobs import HOLDING_STATES, JobState
from scheduler.services import nodes
from scheduler.services.arrays import array_submit
from scheduler.services.jobs import job_submit

pytestmark = pytest.mark.django_db


def _fields(obj, names) -> dict:
    return {name: getattr(obj, name) for name in names}


def test_the_heartbeats_allocations_are_the_orms_own(alice, cluster):
    """Every column the heartbeat reads, for a notebook (its server and token), an array task, a share of a
    GPU with limits and a job with neither: what ``select_related`` read."""
    node = cluster["nodes"][0]
    job_submit(user=alice, name="lab", command="", kind="notebook", gpu_model="h100-80gb")
    array_submit(user=alice, array="3", name="sweep", command="x", gpu_model="h100-80gb")
    job_submit(user=alice, name="slice", command="x", gpu_model="h100-80gb", gpu_fraction=Decimal("0.25"),
               env={"A": "1", "B": "two"}, cpus=4, memory_gb=8, time_limit_minutes=30)
    run_cycle()
    built = nodes._open_allocations(node, HOLDING_STATES)
    orm = {a.pk: a for a in Allocation.objects.filter(node=node, ended_at__isnull=True).select_related(
        "job", "job__priority_class", "job__team", "job__notebook_server", "gpu")}
    assert len(built) == len(orm) == 3 and {a.job.kind for a in built} >= {"notebook", "training"}
    for alloc in built:
        ref = orm[alloc.pk]
        for got, want, rows in [(alloc, ref, nodes._ALLOC), (alloc.gpu, ref.gpu, nodes._GPU),
                                (alloc.job, ref.job, nodes._JOB),
                                (alloc.job.priority_class, ref.job.priority_class, nodes._CLASS),
                                (alloc.job.team, ref.job.team, nodes._TEAM)]:
            assert _fields(got, rows.attnames) == _fields(want, rows.attnames), rows.model
        if ref.job.kind == "notebook":
            server = alloc.job.notebook_server
            assert _fields(server, nodes._SERVER.attnames) == _fields(ref.job.notebook_server, nodes._SERVER.attnames)
        else:
            with pytest.raises(Job.notebook_server.RelatedObjectDoesNotExist):
                alloc.job.notebook_server  # noqa: B018 - none, known without a query
    [notebook] = [a for a in nodes.node_assignments(node) if a["kind"] == "notebook"]
    assert notebook["env"]["JUPYTER_TOKEN"]  # decrypted from the row read along


def test_the_token_reads_its_node_and_pool_as_the_orm_does(cluster, rf):
    node = cluster["nodes"][0]
    Node.objects.filter(pk=node.pk).update(labels={"zone": "a", "rack": "7"},
                                           executor_info={"isolates": True, "runtime": "podman"})
    token, raw = NodeToken.issue(node)
    request = rf.post("/api/v1/node/heartbeat/", HTTP_AUTHORIZATION=f"Node {raw}")
    principal, got = NodeTokenAuthentication().authenticate(request)
    want = Node.objects.select_related("pool").get(pk=node.pk)
    fields = [f.attname for f in Node._meta.concrete_fields]
    assert _fields(principal.node, fields) == _fields(want, fields)
    assert principal.node.labels == {"zone": "a", "rack": "7"} and principal.node.isolates_tenants
    pool_fields = [f.attname for f in want.pool._meta.concrete_fields]
    assert _fields(principal.node.pool, pool_fields) == _fields(want.pool, pool_fields)
    assert (got.pk, got.node_id, got.prefix) == (token.pk, node.pk, token.prefix)
    assert request.reference is not None


def test_a_compiled_query_refuses_a_marker_that_is_not_one_parameter():
    query = CompiledQuery(lambda node_id: Node.objects.filter(pk=node_id).values_list("pk"), node_id=-(2**62))
    assert query.sql_params(node_id=7)[1] == [7]
    for build in (lambda node_id: Node.objects.values_list("pk"),  # not in the query
                  lambda node_id: Node.objects.filter(pk=node_id, heartbeat_seq=node_id).values_list("pk")):
        with pytest.raises(ImproperlyConfigured):
            CompiledQuery(build, node_id=-(2**62)).sql_params(node_id=7)


def test_a_heartbeat_stamps_its_write_and_its_deliveries_with_one_database_clock(alice, cluster, node_client):
    client = node_client()
    job = job_submit(user=alice, name="one", command="true", gpu_model="h100-80gb")
    run_cycle()
    assert client.post("/api/v1/node/heartbeat/", {"seq": 1}, format="json").status_code == 200
    node = Node.objects.get(pk=cluster["nodes"][0].pk)
    delivered = job.transitions.get(to_state=JobState.STARTING)
    assert node.last_heartbeat_at == delivered.at and node.heartbeat_seq == 1
    again = client.post("/api/v1/node/heartbeat/", {"seq": 1}, format="json")
    assert again.status_code == 409 and again.json()["field"] == "seq"
    assert Node.objects.get(pk=node.pk).last_heartbeat_at == delivered.at  # refused: nothing written


def test_a_kinds_image_changed_reaches_the_next_heartbeat(alice, cluster, node_client):
    """The kinds' images are remembered at the reference version the token's query reads: a change moves it."""
    client = node_client()
    job = job_submit(user=alice, name="eval", command="x", kind="evaluation", gpu_model="h100-80gb")
    Job.objects.filter(pk=job.pk).update(image="")  # it runs in its kind's default, whatever that is now
    run_cycle()

    def image(seq):
        answer = client.post("/api/v1/node/heartbeat/", {"seq": seq}, format="json").json()
        return next(a["image"] for a in answer["assignments"] if a["job_id"] == job.pk)

    assert image(1) == settings.ROTA_DEFAULT_IMAGE
    KindImage.objects.create(kind="evaluation", image="localhost/rota/eval:3")
    assert image(2) == "localhost/rota/eval:3"
    KindImage.objects.filter(kind="evaluation").update(image="localhost/rota/eval:4")
    assert image(3) == "localhost/rota/eval:4"


HEARTBEATS = [
    {"seq": 1},
    {"seq": 2, "running": [{"job_id": 1, "attempt": 1, "pid": 5, "health": "healthy"}],
     "gpus": [{"uuid": "GPU-0", "healthy": False, "reason": "XID 79"}],
     "telemetry": [{"uuid": "GPU-0", "at": "2026-12-07T02:00:00Z", "util_pct": 50, "xid": None}],
     "engine": {"name": "slurm", "state": "ready"}},
    {"seq": 0, "running": [{"job_id": 0, "attempt": 2**31}], "gpus": [{"uuid": "x" * 81, "healthy": "maybe"}],
     "telemetry": [{"uuid": "GPU-0", "at": "soon", "util_pct": 101, "temperature_c": -51}] * 2},
    {"seq": 3, "telemetry": [{}] * (2001)}, {"seq": 3, "gpus": "all"}, ["not", "an", "object"], {},
]
REGISTERS = [
    {"gpus": [{"index": 0, "uuid": "GPU-0", "model": "h100-80gb", "memory_mb": 81559}], "labels": {"zone": "a"},
     "executor": {"name": "process", "isolates": True}},
    {"gpus": [{"index": 0, "uuid": "GPU-0", "model": "NVIDIA H100 80GB HBM3", "memory_mb": 81559}] * 2},
    {"gpus": [{"index": -1, "uuid": "", "model": "toaster", "memory_mb": 0}], "labels": {"Bad Key": "x"}},
]


def _checked(serializer) -> tuple:
    valid = serializer.is_valid()
    return valid, dict(serializer.validated_data) if valid else serializer.errors


@pytest.mark.parametrize(("serializer", "body"), [(HeartbeatSerializer, body) for body in HEARTBEATS]
                         + [(RegisterSerializer, body) for body in REGISTERS])
def test_a_nodes_report_checked_by_shared_fields_gets_drfs_own_answer(serializer, body):
    """The node's serializers validate through fields bound once per class (portal.api.SharedFields): the same
    data, or the same errors naming each field and limit, as fields built for the request."""
    shared, own = serializer(data=body), serializer(data=body, context={"own": True})
    assert shared.fields is serializer(data={}).fields and own.fields is not shared.fields
    assert _checked(shared) == _checked(own)


def test_the_cache_keeps_one_redis_client_per_pool():
    """Django's Redis cache built a client (and its ~170 callbacks) at every call: the throttle's two per request."""
    cache = RedisCache(settings.REDIS_URL, {"KEY_PREFIX": "rota-test-cache"})
    client = cache._cache.get_client(write=True)
    assert cache._cache.get_client(write=True) is client and cache._cache.get_client() is client
    cache.set("history", [1.5, 2.5], 10)
    assert cache.get("history") == [1.5, 2.5]
    cache.delete("history")


def test_a_node_token_revoked_fails_at_the_next_request(cluster):
    token, raw = NodeToken.issue(cluster["nodes"][0])
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Node {raw}")
    assert client.post("/api/v1/node/wait/", {"timeout_s": 0.01}, format="json").status_code == 200
    NodeToken.objects.filter(pk=token.pk).update(revoked_at=token.created_at)
    assert client.post("/api/v1/node/wait/", {"timeout_s": 0.01}, format="json").status_code == 401
