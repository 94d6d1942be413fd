"""The Slurm bridge against a real Slurm and the portal's node API on a live server: Slurm's nodes become Rota
nodes with their GPUs, CPUs, memory and features; drains and downs flow both ways."""

import subprocess
import sys
import time
from pathlib import Path

import pytest

from scheduler.cycle import run_cycle
from scheduler.models import Gpu, Job, Node
from scheduler.services.jobs import job_submit
from scheduler.services.nodes import node_set_state
from scheduler.slurm.bridge import Bridge
from scheduler.slurm.commands import Slurm
from scheduler.slurm.inventory import GpuModelMap
from scheduler.slurm.localcluster import SlurmCluster, SlurmClusterError
from tests.slurm.conftest import MODELS

ROOT = Path(__file__).resolve().parents[2]


def sinfo(slurm: SlurmCluster) -> str:
    """The node's state and reason; Slurm's "*" (not responding until the next ping) left out."""
    return slurm.client("sinfo", "-h", "-N", "-o", "%T|%E").strip().replace("*", "")


@pytest.fixture
def bridge(enrolled, live_server, slurm):
    _, tokens = enrolled
    return Bridge(Slurm(slurm.conf), live_server.url, tokens, GpuModelMap.parse(MODELS))


def test_it_registers_the_slurm_node_with_its_gpus_cpus_memory_and_features(bridge, enrolled, slurm):
    node, _ = enrolled
    assert bridge.poll() == {slurm.node: "registered"}
    assert bridge.poll() == {slurm.node: "heartbeat"}
    node.refresh_from_db()
    assert (node.state, node.cpus, node.memory_mb, node.gpu_backend) == (Node.READY, 64, 256000, "slurm")
    assert node.labels == {"ib": "true", "nvme": "true"}
    gpus = list(Gpu.objects.filter(node=node).values_list("index", "model__name", "memory_mb"))
    assert gpus == [(i, "h100-80gb", 81559) for i in range(8)]


def test_it_registers_again_when_the_node_changes_in_slurm(bridge, enrolled, slurm):
    node, _ = enrolled
    bridge.poll()
    slurm.client("scontrol", "update", f"nodename={slurm.node}", "AvailableFeatures=ib", "ActiveFeatures=ib")
    try:
        assert bridge.poll() == {slurm.node: "registered"}
    finally:
        slurm.client("scontrol", "update", f"nodename={slurm.node}", "AvailableFeatures=ib,nvme",
                     "ActiveFeatures=ib,nvme")
    node.refresh_from_db()
    assert node.labels == {"ib": "true"}


def test_a_node_drained_in_slurm_is_drained_in_rota_with_its_reason_until_slurm_resumes_it(bridge, enrolled, slurm):
    node, _ = enrolled
    bridge.poll()
    slurm.client("scontrol", "update", f"nodename={slurm.node}", "state=drain", "reason=fan failure")
    bridge.poll()
    node.refresh_from_db()
    assert (node.state, node.state_reason, node.state_changed_by) == (Node.DRAINED, "slurm: fan failure", None)
    bridge.poll()  # Slurm's own drain is not mirrored back into Slurm
    assert "fan failure" in slurm.client("sinfo", "-h", "-N", "-o", "%E")
    resume(slurm)
    bridge.poll()
    node.refresh_from_db()
    assert (node.state, node.state_reason) == (Node.READY, "slurm: in service")


def test_a_rota_drain_drains_the_node_in_slurm_and_a_rota_resume_resumes_it(bridge, enrolled, slurm, staff):
    node, _ = enrolled
    bridge.poll()
    node_set_state(node=node, state=Node.DRAINING, reason="rack maintenance", user=staff)
    bridge.poll()
    assert sinfo(slurm) == "drained|rota: rack maintenance"
    bridge.poll()  # Slurm reporting Rota's drain back changes nothing in Rota
    node.refresh_from_db()
    assert (node.state, node.state_reason, node.state_changed_by) == (Node.DRAINING, "rack maintenance", staff)
    node_set_state(node=node, state=Node.READY, reason="done", user=staff)
    bridge.poll()
    assert sinfo(slurm) == "idle|none"
    bridge.poll()
    node.refresh_from_db()
    assert (node.state, node.state_reason) == (Node.READY, "done")


def test_a_node_slurm_marks_down_is_down_in_rota_its_job_requeued_and_back_when_slurm_resumes_it(
        bridge, enrolled, slurm, alice):
    node, _ = enrolled
    bridge.poll()
    job = job_submit(user=alice, name="train", command="true", gpus=2, gpu_model="h100-80gb")
    run_cycle()
    job.refresh_from_db()
    assert job.state == "admitted" and job.allocations.get(gpu__index=0).node == node
    bridge.poll()  # delivered to the node
    slurm.client("scontrol", "update", f"nodename={slurm.node}", "state=down", "reason=power supply")
    assert bridge.poll() == {slurm.node: "heartbeat"}
    node.refresh_from_db()
    job.refresh_from_db()
    assert (node.state, node.state_reason) == (Node.DOWN, "slurm: power supply")
    assert (job.state, job.attempt) == ("pending", 2) and not job.allocations.filter(ended_at__isnull=True)
    # A node Slurm calls down keeps reporting; with ReturnToService=2 slurmctld may already have returned it
    # by itself (slurmd registered again), and then the bridge registers it back at this poll.
    second = bridge.poll()
    assert second in ({slurm.node: "heartbeat"}, {slurm.node: "registered"})
    resume(slurm)  # (slurmctld may refuse it while the down node's job is completing)
    slurm.wait_for_node(("IDLE",))
    third = bridge.poll()
    assert {slurm.node: "registered"} in (second, third), (second, third)
    node.refresh_from_db()
    assert node.state == Node.READY


def test_a_slurm_node_without_a_token_is_not_spoken_for(bridge, enrolled, slurm):
    node, tokens = enrolled
    (tokens / f"{slurm.node}.token").unlink()
    assert bridge.poll() == {slurm.node: "not enrolled"}
    node.refresh_from_db()
    assert node.registered_at is None and not Gpu.objects.filter(node=node).exists()


def test_the_command_line_prints_how_to_enroll_and_then_registers_the_node(enrolled, live_server, slurm, tmp_path):
    node, tokens = enrolled
    empty = tmp_path / "none"
    empty.mkdir()
    base = [sys.executable, "-m", "scheduler.slurm"]
    conf = ["--slurm-conf", str(slurm.conf)]
    enroll = subprocess.run([*base, "enroll", "--token-dir", str(empty), *conf], capture_output=True, text=True,
                            cwd=ROOT, check=True)
    assert enroll.stdout.strip() == (f"python manage.py node_token issue {slurm.node} --pool {slurm.partition} "
                                     f"--output {empty}/{slurm.node}.token")
    run = subprocess.run([*base, "run", "--once", "--portal", live_server.url, "--token-dir", str(tokens),
                          "--gpu-model", MODELS[0], *conf], capture_output=True, text=True, cwd=ROOT)
    assert (run.returncode, run.stdout) == (0, f"{slurm.node}\tregistered\n"), run.stderr
    assert Job.objects.count() == 0 and Gpu.objects.filter(node=node).count() == 8


def resume(slurm) -> None:
    """``scontrol update state=resume``, again while slurmctld still refuses it ("Invalid node state
    specified" while the down node's job is completing). With ``ReturnToService=2`` slurmctld may also
    return the node by itself when slurmd registers again; it then refuses a resume the same way, and
    the node is already what the test wants."""
    deadline = time.monotonic() + 30
    while True:
        try:
            slurm.client("scontrol", "update", f"nodename={slurm.node}", "state=resume")
            return
        except SlurmClusterError:
            if slurm.node_state().rstrip("*~#") in ("IDLE", "MIXED", "ALLOCATED"):
                return
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
