"""A real Slurm 22.05 cluster on loopback for the tests, the benchmarks and the demo (``make dev SLURM=1``):
``munged``, ``slurmctld`` and one ``slurmd`` whose node declares stand-in GPUs (see /work/shared/slurm-notes.md
for why each setting is what it is).

Everything lives in one directory: configuration, the MUNGE key and socket, state, spool, logs and PID files,
so several clusters (one per test session or helper) run side by side. Daemons are stopped by their PIDs.

    python -m scheduler.slurm.localcluster up DIR [--gpus 8]    # prints the SLURM_CONF to export
    python -m scheduler.slurm.localcluster down DIR
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("slurmd", "slurmctld", "munged")  # stop order: the node, the controller, then authentication
REQUIRED = {"munged": "munge", "mungekey": "munge", "slurmctld": "slurmctld", "slurmd": "slurmd",
            "sbatch": "slurm-client", "scontrol": "slurm-client"}
NVIDIA_MAJOR = 195  # the character-device major of /dev/nvidiaN; nothing ever opens these stand-ins


class SlurmClusterError(RuntimeError):
    """The cluster could not be started: what is missing or which daemon failed, with its log's tail."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class SlurmCluster:
    """One controller and one node named ``node`` with ``gpus`` stand-in GPUs of GRES type ``gpu_type``,
    in partition ``partition`` with node features ``features``. ``env`` is what a Slurm client needs."""

    root: Path
    node: str = "slurm-gpu-01"
    partition: str = "gpu"
    gpus: int = 8
    gpu_type: str = "h100"
    cpus: int = 64
    memory_mb: int = 256_000
    features: tuple[str, ...] = ("ib", "nvme")
    cluster_name: str = "rota-test"
    epilog: Path | None = None  # slurmd runs it as root after each job (the bridge's: scheduler/slurm/epilog.sh)
    min_job_age_s: int = 300
    ctld_port: int = 0
    slurmd_port: int = 0
    env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.root = Path(self.root).resolve()
        self.ctld_port = self.ctld_port or free_port()
        self.slurmd_port = self.slurmd_port or free_port()
        self.conf = self.root / "etc" / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    # -- paths -------------------------------------------------------------------------------------------------
    def _path(self, *parts: str) -> Path:
        return self.root.joinpath(*parts)

    def pid_file(self, daemon: str) -> Path:
        return self._path("run", f"{daemon}.pid")

    def log_file(self, daemon: str) -> Path:
        return self._path("log", f"{daemon}.log")

    # -- configuration -----------------------------------------------------------------------------------------
    def write_config(self) -> None:
        """slurm.conf, gres.conf, cgroup.conf, the MUNGE key and the GPU device stand-ins."""
        for sub in ("etc", "run", "log", "state", f"spool/{self.node}", "dev", "munge"):
            self._path(sub).mkdir(parents=True, exist_ok=True)
        for index in range(self.gpus):
            device = self._path("dev", f"nvidia{index}")
            if not device.exists():
                os.mknod(device, 0o600 | 0o020000, os.makedev(NVIDIA_MAJOR, index))  # S_IFCHR
        key = self._path("munge", "munge.key")
        if not key.exists():
            subprocess.run(["mungekey", "--create", "--keyfile", str(key)], check=True, capture_output=True)
        os.chmod(key, 0o400)
        gres = f"gpu:{self.gpu_type}:{self.gpus}" if self.gpus else ""
        lines = [
            f"ClusterName={self.cluster_name}",
            "SlurmctldHost=localhost(127.0.0.1)",
            f"SlurmctldPort={self.ctld_port}",
            f"SlurmdPort={self.slurmd_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self._path('munge', 'munge.socket')}",
            f"StateSaveLocation={self._path('state')}",
            f"SlurmdSpoolDir={self._path('spool', '%n')}",
            f"SlurmctldPidFile={self.pid_file('slurmctld')}",
            f"SlurmdPidFile={self.pid_file('slurmd')}",
            f"SlurmctldLogFile={self.log_file('slurmctld')}",
            f"SlurmdLogFile={self.log_file('slurmd')}",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SwitchType=switch/none",
            "MpiDefault=none",
            "SchedulerType=sched/backfill",
            "SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,bf_interval=1",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            "DefMemPerCPU=1024",  # without it a job that names no memory takes the whole node
            "SlurmdParameters=config_overrides",
            "GresTypes=gpu",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/filetxt",
            f"JobCompLoc={self._path('log', 'jobcomp.log')}",
            "ReturnToService=2",
            "JobRequeue=0",  # as docs/slurm.md asks: Rota requeues, with a new attempt
            "MaxArraySize=100001",
            f"MinJobAge={self.min_job_age_s}",
            "KillWait=5",
            "InactiveLimit=0",
            "SlurmctldTimeout=30",
            "SlurmdTimeout=60",
            *([f"Epilog={self.epilog}"] if self.epilog else []),
            (f"NodeName={self.node} NodeHostname=localhost NodeAddr=127.0.0.1 CPUs={self.cpus} "
             f"RealMemory={self.memory_mb} State=UNKNOWN"
             + (f" Gres={gres}" if gres else "") + (f" Feature={','.join(self.features)}" if self.features else "")),
            f"PartitionName={self.partition} Nodes={self.node} Default=YES MaxTime=INFINITE State=UP",
        ]
        self.conf.write_text("\n".join(lines) + "\n")
        devices = self._path("dev", f"nvidia[0-{self.gpus - 1}]")
        gres_lines = ["AutoDetect=off"]
        if self.gpus:
            gres_lines.append(f"NodeName={self.node} Name=gpu Type={self.gpu_type} Count={self.gpus} File={devices}")
        (self.conf.parent / "gres.conf").write_text("\n".join(gres_lines) + "\n")
        (self.conf.parent / "cgroup.conf").write_text("CgroupPlugin=autodetect\nConstrainDevices=no\n")

    # -- life cycle --------------------------------------------------------------------------------------------
    def start(self, timeout: float = 60) -> SlurmCluster:
        """Write the configuration, start the three daemons and wait until the node is idle."""
        missing = sorted({pkg for cmd, pkg in REQUIRED.items() if shutil.which(cmd) is None
                          and not Path("/usr/sbin", cmd).exists()})
        if missing:
            raise SlurmClusterError(f"Slurm is not installed: apt-get install -y {' '.join(missing)} "
                                    "(scripts/system-packages.sh does it)")
        if os.geteuid() != 0:
            raise SlurmClusterError("slurmd must run as root to start jobs as their users; run the tests as root")
        self.write_config()
        self._run("munged", ["munged", "--socket", str(self._path("munge", "munge.socket")),
                             "--key-file", str(self._path("munge", "munge.key")),
                             "--pid-file", str(self.pid_file("munged")),
                             "--log-file", str(self.log_file("munged")),
                             "--seed-file", str(self._path("munge", "munge.seed")), "--force"])
        self._run("slurmctld", ["slurmctld", "-c", "-i", "-f", str(self.conf)])  # -c: no state from an earlier run
        self._run("slurmd", ["slurmd", "-N", self.node, "-f", str(self.conf)])
        self.wait_for_node(("IDLE",), timeout)
        return self

    def _run(self, daemon: str, argv: list[str]) -> None:
        """Start a daemon that forks into the background and wait for its PID file."""
        self.pid_file(daemon).unlink(missing_ok=True)
        done = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=30)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if done.returncode == 0 and self.pid(daemon):
                return
            time.sleep(0.05)
        raise SlurmClusterError(f"{daemon} did not start (exit {done.returncode}): {done.stderr.strip()[-500:]}\n"
                                f"{self._tail(daemon)}")

    def pid(self, daemon: str) -> int | None:
        """The daemon's PID when it runs, else None."""
        try:
            pid = int(self.pid_file(daemon).read_text().split()[0])
            os.kill(pid, 0)
        except (OSError, ValueError, IndexError):
            return None
        return pid

    def stop_daemon(self, daemon: str, timeout: float = 20) -> None:
        """SIGTERM the daemon by its PID, SIGKILL it after ``timeout`` s."""
        pid = self.pid(daemon)
        if pid is None:
            return
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except OSError:
                return
            time.sleep(0.05)
        os.kill(pid, signal.SIGKILL)

    def stop(self) -> None:
        """Stop the daemons (jobs still running are killed with slurmd's stepds)."""
        subprocess.run(["scancel", "--full", "--quiet", f"--partition={self.partition}"], env=self.env,
                       capture_output=True, timeout=30)
        for daemon in DAEMONS:
            self.stop_daemon(daemon)

    def restart_controller(self, *, clear_state: bool = False) -> None:
        """Stop and start slurmctld: its state survives in StateSaveLocation, unless ``clear_state`` (``-c``:
        every job is forgotten, as after a lost state directory)."""
        self.stop_daemon("slurmctld")
        self._run("slurmctld", ["slurmctld", *(["-c"] if clear_state else []), "-f", str(self.conf)])

    # -- queries -----------------------------------------------------------------------------------------------
    def client(self, *argv: str, check: bool = True) -> str:
        """Run a Slurm client command against this cluster; its stdout."""
        done = subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=30)
        if check and done.returncode != 0:
            raise SlurmClusterError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
        return done.stdout

    def node_state(self) -> str:
        """The node's state as ``sinfo`` prints it in long form (``IDLE``, ``DRAINED``, ``MIXED``…)."""
        return self.client("sinfo", "-h", "-N", "-n", self.node, "-o", "%T").strip().upper()

    def wait_for_node(self, states: tuple[str, ...], timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            try:
                state = self.node_state()
            except (SlurmClusterError, subprocess.TimeoutExpired):
                state = "(no answer)"
            if state.rstrip("*~#") in states:
                return state
            time.sleep(0.2)
        raise SlurmClusterError(f"node {self.node} is {state}, not {'/'.join(states)} after {timeout}s\n"
                                f"{self._tail('slurmctld')}\n{self._tail('slurmd')}")

    def _tail(self, daemon: str, lines: int = 15) -> str:
        try:
            text = self.log_file(daemon).read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return f"({daemon}: no log)"
        return f"--- {daemon} log ---\n" + "\n".join(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scheduler.slurm.localcluster",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["up", "down"])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--gpu-type", default="h100")
    parser.add_argument("--node", default="slurm-gpu-01")
    parser.add_argument("--partition", default="gpu")
    parser.add_argument("--epilog", type=Path, help="Epilog= (the bridge's containers: scheduler/slurm/epilog.sh)")
    args = parser.parse_args(argv)
    cluster = SlurmCluster(args.dir, node=args.node, partition=args.partition, gpus=args.gpus,
                           gpu_type=args.gpu_type, epilog=args.epilog)
    if args.action == "down":
        for daemon in DAEMONS:
            cluster.stop_daemon(daemon)
        return 0
    try:
        cluster.start()
    except SlurmClusterError as error:
        print(error, file=sys.stderr)
        return 1
    print(f"export SLURM_CONF={cluster.conf}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
