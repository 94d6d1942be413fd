"""``GET /api/v1/nodes/``: nodes with their present GPUs, a page at a time, filtered by pool, state and name."""

from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduler.models import Node
from tests.factories import GpuFactory, NodeFactory, PoolFactory


def test_it_lists_nodes_by_name_with_their_present_gpus_in_index_order(api, alice, cluster):
    h100 = cluster["nodes"][0]
    h100.gpus.filter(index=3).update(present=False)  # gone from the node: not listed
    h100.gpus.filter(index=0).update(healthy=False, health_reason="XID 79")
    body = api(alice).get("/api/v1/nodes/").json()
    assert body["count"] == 2 and body["next"] is None
    assert [n["name"] for n in body["results"]] == ["node-a100", "node-h100"]
    gpus = body["results"][1]["gpus"]
    assert [g["index"] for g in gpus] == [0, 1, 2]
    assert gpus[0]["healthy"] is False and gpus[0]["health_reason"] == "XID 79"
    assert body["results"][1]["pool"] == "train"


def test_it_pages_with_limit_and_offset_in_a_fixed_number_of_queries(api, alice, cluster):
    pool = cluster["pool"]
    for i in range(30):
        node = NodeFactory(name=f"node-x{i:02d}", pool=pool)
        for k in range(2):
            GpuFactory(node=node, index=k, model=cluster["h100"], uuid=f"GPU-x{i}-{k}")
    client = api(alice)
    first = client.get("/api/v1/nodes/", {"limit": 10}).json()
    assert first["count"] == 32 and len(first["results"]) == 10
    second = client.get(first["next"]).json()
    assert [n["name"] for n in second["results"]][0] == "node-x08"  # a100, h100, x00..x07, then x08
    names = set()
    offset = 0
    while True:
        with CaptureQueriesContext(connection) as queries:
            page = client.get("/api/v1/nodes/", {"limit": 7, "offset": offset}).json()
        assert len(queries) <= 6, [q["sql"] for q in queries]  # auth, count, nodes, GPUs: not one per node
        names |= {n["name"] for n in page["results"]}
        offset += 7
        if not page["next"]:
            break
    assert len(names) == 32


def test_it_filters_by_pool_state_and_part_of_the_name(api, alice, cluster):
    other = PoolFactory(name="infer")
    NodeFactory(name="node-l4", pool=other)
    Node.objects.filter(name="node-a100").update(state=Node.DRAINING)
    client = api(alice)

    def names(**params):
        response = client.get("/api/v1/nodes/", params)
        assert response.status_code == 200, response.content
        return [n["name"] for n in response.json()["results"]]

    assert names(pool="infer") == ["node-l4"]
    assert names(pool="train") == ["node-a100", "node-h100"]
    assert names(state="draining") == ["node-a100"]
    assert names(name="H100") == ["node-h100"]
    assert names(pool="train", state="ready", name="a100") == []


def test_a_bad_filter_is_named_and_lists_what_is_allowed(api, alice, cluster):
    client = api(alice)
    response = client.get("/api/v1/nodes/", {"state": "sleeping", "pool": "nowhere"})
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert errors["state"] == ["must be one of ready, draining, drained, down, unhealthy; got 'sleeping'"]
    assert errors["pool"] == ["no pool named 'nowhere'; pools: train"]
    response = client.get("/api/v1/nodes/", {"name": "n" * 300})
    assert response.status_code == 400 and response.json()["errors"]["name"] == ["at most 63 characters"]


def test_it_needs_a_login(api, cluster):
    assert api().get("/api/v1/nodes/").status_code in (401, 403)
