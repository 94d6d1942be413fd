"""A real Slurm cluster for the session (munged, slurmctld, slurmd with 8 stand-in GPUs on loopback). It is
never skipped: a machine without Slurm fails these tests with the command that installs it."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from scheduler.models import Node, NodeToken, Pool
from scheduler.slurm.accounting import Reconciler
from scheduler.slurm.bridge import Bridge
from scheduler.slurm.commands import Slurm
from scheduler.slurm.containers import EPILOG, SlurmContainers
from scheduler.slurm.inventory import GpuModelMap
from scheduler.slurm.jobcomp import JobCompLog
from scheduler.slurm.launcher import Launcher
from scheduler.slurm.localcluster import SlurmCluster
from tests.slurm.users import unix_users

ROOT = Path(__file__).resolve().parents[2]
MODELS = ["h100=h100-80gb:81559"]  # the test cluster's GRES type h100 as Rota's GPU model


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """One node ``slurm-gpu-01`` (64 CPUs, 256000 MB, 8 × gpu:h100, features ib,nvme) in partition ``gpu``.
    Its directory is one that the teams' uids may pass through (0711; pytest's are 0700): slurmd starts a job
    as its team's uid from the batch script in its spool directory."""
    root = Path(tempfile.mkdtemp(prefix="rota-slurm-"))
    root.chmod(0o711)
    cluster = SlurmCluster(root, epilog=EPILOG)
    try:
        yield cluster.start()
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def images() -> None:
    """The local images the container tests run (``scripts/build-images.sh``: kept when present)."""
    subprocess.run([str(ROOT / "scripts" / "build-images.sh")], check=True, cwd=ROOT, timeout=600)


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
    # Rota's job ids start again in the next test's database: its bridge must not find this test's attempts.
    (slurm_cluster.root / "log" / "jobcomp.log").write_text("")


@pytest.fixture
def enrolled(transactional_db, cluster, slurm: SlurmCluster, tmp_path):
    """The Slurm node enrolled as ``manage.py node_token issue slurm-gpu-01 --pool gpu --output …`` does:
    a node in pool ``gpu`` (open to vision) with its token in the bridge's token directory."""
    pool = Pool.objects.create(name=slurm.partition)
    pool.teams.add(cluster["vision"])
    Node.objects.filter(pk__in=[n.pk for n in cluster["nodes"]]).update(state=Node.DOWN)  # work goes to Slurm
    node = Node.objects.create(name=slurm.node, pool=pool)
    _, raw = NodeToken.issue(node)
    tokens = tmp_path / "tokens"
    tokens.mkdir()
    (tokens / f"{slurm.node}.token").write_text(raw + "\n")
    return node, tokens


@pytest.fixture
def output_dir() -> Iterator[Path]:
    """The bridge's output directory: the teams' uids may pass through it (0711) to the files made for them."""
    path = Path(tempfile.mkdtemp(prefix="rota-slurm-output-"))
    path.chmod(0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def team_users(cluster):
    """The teams' uids as users of the host, as Slurm needs (see tests/slurm/users.py)."""
    with unix_users(sorted({cluster["vision"].unix_id, cluster["nlp"].unix_id})):
        yield


@pytest.fixture
def make_bridge(enrolled, live_server, slurm, output_dir, team_users):
    """A new bridge each call, as after a restart: nothing in memory, the same Slurm and token directory."""
    _, tokens = enrolled
    output = output_dir

    def make(*, containers: bool = False) -> Bridge:
        """``containers``: each job in its image (``--containers``), the cluster's stand-in GPU devices."""
        images = SlurmContainers(output, device_dir=slurm.root / "dev") if containers else None
        launcher = Launcher(Slurm(slurm.conf), output, partition=slurm.partition, containers=images)
        reconciler = Reconciler(JobCompLog(Slurm(slurm.conf).jobcomp_path()))
        return Bridge(Slurm(slurm.conf), live_server.url, tokens, GpuModelMap.parse(MODELS), launcher=launcher,
                      reconciler=reconciler)

    return make
