"""A real Slurm cluster for the session (munged, slurmctld, slurmd with 8 stand-in GPUs on loopback). It is
never skipped: a machine without Slurm fails these tests with the command that installs it."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.slurm.cluster import SlurmCluster


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """One node ``slurm-gpu-01`` (64 CPUs, 256000 MB, 8 × gpu:h100, features ib,nvme) in partition ``gpu``.
    Its directory is one that the teams' uids may pass through (0711; pytest's are 0700): slurmd starts a job
    as its team's uid from the batch script in its spool directory."""
    root = Path(tempfile.mkdtemp(prefix="rota-slurm-"))
    root.chmod(0o711)
    cluster = SlurmCluster(root)
    try:
        yield cluster.start()
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def slurm(slurm_cluster: SlurmCluster) -> Iterator[SlurmCluster]:
    """The session's cluster, with no jobs and its node back to idle, undrained, after each test."""
    yield slurm_cluster
    # Jobs are cancelled and the node undrained. A job cancelled soon after its launch can stay COMPLETING in
    # Slurm 22.05 for about 100 s (its GPU stays taken, the node MIXED); the next tests use other GPUs.
    slurm_cluster.client("scancel", f"--partition={slurm_cluster.partition}", check=False)
    if "DRAIN" in slurm_cluster.node_state():
        slurm_cluster.client("scontrol", "update", f"nodename={slurm_cluster.node}", "state=resume", check=False)
    slurm_cluster.wait_for_node(("IDLE", "MIXED"), timeout=30)
