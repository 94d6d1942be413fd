"""Cluster specs: spec strings, YAML node-group files, the trace's own node list, and their errors."""

import pytest

from scheduler.sim.cluster import load_cluster, parse_spec
from scheduler.sim.trace import TraceError, TraceNode


def test_it_builds_72_nodes_of_8_gpus_from_a_spec_string():
    cluster = load_cluster("72x8:v100")
    assert cluster.capacity == 576 and len(cluster.nodes) == 72
    assert cluster.capacity_by_model() == {"v100": 576}
    assert cluster.pools == ("default",)
    assert [g.id for g in cluster.nodes[1].gpus] == list(range(9, 17))
    assert cluster.nodes[1].gpus[0].node == "node-0001" and cluster.nodes[1].gpus[0].memory_mb == 16384


def test_it_parses_groups_with_models_and_pools():
    cluster = load_cluster("64x8:v100@train,8x8:A100-80GB@infer,2x4")
    assert cluster.capacity_by_model() == {"v100": 512, "a100-80gb": 64, "gpu": 8}
    assert cluster.pools == ("train", "infer", "default")
    assert cluster.nodes[64].gpus[0].memory_mb == 80 * 1024
    assert cluster.pools_for("anyone") == frozenset({"train", "infer", "default"})


@pytest.mark.parametrize(
    "spec", ["72*8:v100", "72x8:v100,", "x8", "0x8:v100", "72x0", "72x8:v100@", "72x8:a b"]
)
def test_it_rejects_a_malformed_group_and_names_it(spec):
    with pytest.raises(ValueError, match="bad cluster group"):
        parse_spec(spec)


def test_it_loads_a_yaml_cluster_with_pool_access(tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_text(
        "node_groups:\n"
        "  - {count: 2, gpus: 8, model: h100-80gb, pool: train, cpus: 96, memory_gb: 1024,\n"
        "     labels: {network: ib}}\n"
        "  - {count: 1, gpus: 4, model: l40s-48gb, pool: infer}\n"
        "pools:\n"
        "  infer: [serving]\n"
        "  train: all\n"
    )
    cluster = load_cluster(str(path))
    assert cluster.capacity == 20
    assert cluster.nodes[0].cpus == 96 and cluster.nodes[0].memory_mb == 1024 * 1024
    assert dict(cluster.nodes[0].labels) == {"network": "ib"}
    assert cluster.pools_for("serving") == frozenset({"train", "infer"})
    assert cluster.pools_for("research") == frozenset({"train"})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("node_groups: []\n", "non-empty 'node_groups' list"),
        (
            "node_groups:\n  - {count: 2, gpus: -1}\n",
            r"node_groups\[0\].gpus: expected a positive whole number",
        ),
        (
            "node_groups:\n  - {count: 2, gpus: 8, colour: red}\n",
            r"node_groups\[0\]: unknown key\(s\) colour",
        ),
        (
            "node_groups:\n  - {count: 1, gpus: 8}\npools: {infer: [a]}\n",
            "pools.infer: no node group is in this pool",
        ),
        ("node_groups: [\n", "not valid YAML"),
    ],
)
def test_it_names_the_file_and_key_of_a_bad_yaml_cluster(tmp_path, text, message):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(TraceError, match=message):
        load_cluster(str(path))


def test_it_uses_the_trace_node_list_when_no_spec_is_given():
    nodes = (TraceNode("n0", 2, "t4", cpus=64, memory_mb=1000), TraceNode("n1", 8, "v100m32"))
    cluster = load_cluster(None, nodes)
    assert [n.name for n in cluster.nodes] == ["n0", "n1"]
    assert cluster.capacity_by_model() == {"t4": 2, "v100m32": 8}
    assert cluster.nodes[1].gpus[0].memory_mb == 32 * 1024
    with pytest.raises(ValueError, match="give --cluster"):
        load_cluster(None, ())
