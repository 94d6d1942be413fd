"""Slurm's node descriptions turned into node reports (pure: no Slurm, no database)."""

import json

import pytest

from scheduler.slurm.inventory import GpuModelMap, InventoryError, parse_sinfo


def sinfo(**node) -> str:
    base = {"name": "n1", "state": "idle", "state_flags": [], "reason": "", "gres": "gpu:h100:2", "cpus": 32,
            "real_memory": 1000, "active_features": "ib", "partitions": ["gpu"]}
    return json.dumps({"nodes": [{**base, **node}, {**base, **node}]})  # sinfo lists a node per partition


@pytest.mark.parametrize(("state", "flags", "expected"), [
    ("idle", [], "ready"), ("mixed", [], "ready"), ("idle", ["NOT_RESPONDING"], "ready"),
    ("idle", ["DRAIN"], "drained"), ("mixed", ["DRAIN"], "draining"), ("allocated", ["DRAIN"], "draining"),
    ("idle", ["FAIL"], "drained"), ("down", [], "down"), ("down", ["DRAIN"], "down"), ("unknown", [], "down"),
])
def test_it_maps_slurm_states_onto_rotas(state, flags, expected):
    [node] = parse_sinfo(sinfo(state=state, state_flags=flags))
    assert node.rota_state == expected


def test_a_state_without_a_reason_is_named_after_slurms_state():
    [node] = parse_sinfo(sinfo(state="down", state_flags=["NOT_RESPONDING"]))
    assert node.engine_report() == {"name": "slurm", "state": "down", "reason": "down+NOT_RESPONDING in Slurm"}


def test_it_reads_gpus_of_several_types_and_sizes_from_the_gres():
    [node] = parse_sinfo(sinfo(gres="gpu:a100-40gb:1(S:0),gpu:h100:2,shard:8"))
    gpus = node.gpus(GpuModelMap.parse(["h100=h100-80gb:81559"]))
    assert [(g["index"], g["uuid"], g["model"], g["memory_mb"]) for g in gpus] == [
        (0, "SLURM-n1-a100-40gb-0", "a100-40gb", 40960), (1, "SLURM-n1-h100-1", "h100-80gb", 81559),
        (2, "SLURM-n1-h100-2", "h100-80gb", 81559)]


def test_a_gres_type_that_names_no_model_asks_for_a_mapping():
    [node] = parse_sinfo(sinfo(gres="gpu:2"))
    with pytest.raises(InventoryError, match=r"node n1: GPUs without a GRES type .* --gpu-model TYPE=SLUG"):
        node.gpus(GpuModelMap())


@pytest.mark.parametrize(("spec", "message"), [
    ("h100", "write TYPE=SLUG"), ("h100=h100-80gb:lots", "MEMORY_MB must be"), ("h100=h100", "names no size"),
])
def test_a_bad_gpu_model_option_is_named(spec, message):
    with pytest.raises(InventoryError, match=message):
        GpuModelMap.parse([spec])


def test_features_become_labels_and_the_register_report_carries_slurms_state():
    [node] = parse_sinfo(sinfo(active_features="IB,nvlink", state_flags=["DRAIN"], reason="fan"))
    report = node.register_report(GpuModelMap.parse(["h100=h100-80gb"]))
    assert report["labels"] == {"ib": "true", "nvlink": "true"}
    assert report["engine"] == {"name": "slurm", "state": "drained", "reason": "fan"}
    assert (report["cpus"], report["memory_mb"], report["gpu_backend"], len(report["gpus"])) == (32, 1000, "slurm", 2)


def test_the_bridge_imports_without_django():
    """The bridge holds no database credentials: none of the web side is even importable by it."""
    import subprocess
    import sys

    script = ("import sys\nfor n in ('django', 'celery', 'rest_framework', 'psycopg', 'redis'): sys.modules[n] = None\n"
              "import scheduler.slurm.__main__, scheduler.slurm.bridge\nprint('ok')")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert done.stdout.strip() == "ok", done.stderr
