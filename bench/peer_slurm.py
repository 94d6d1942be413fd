"""The Slurm column of ``bench/peer.py``: a real Slurm 22.05 (``tests/slurm/cluster.py``: munged, slurmctld, one
slurmd with 8 stand-in GPUs, tuned for short jobs with
``SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,bf_interval=1``) driven as its users drive it,
with ``sbatch`` (as root; the jobs run as root).

- idle submit -> running: one ``sbatch --gres=gpu:1 --wrap 'date +%s.%N'`` at a time on an idle cluster; the
  job's own first output line is the moment its command ran (later than Slurm's RUNNING mark, never earlier).
- submits: ``sbatch --wrap true`` from one client one after the other, then from 8 concurrent clients; each
  call timed (a fork and exec per call, as a shell loop does).
- drain: ``sbatch --wrap true`` × N from 8 concurrent clients, from the first call to the moment ``squeue``
  has nothing left (polled every 0.5 s, so at most that much is added to Slurm's time).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from burst import burst

from tests.slurm.cluster import SlurmCluster

ACTIVE = "PENDING,RUNNING,COMPLETING,CONFIGURING,SUSPENDED"


class SlurmSide:
    """One Slurm test cluster under a temporary directory; ``close()`` stops it and removes the directory."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="rota-peer-slurm-"))
        self.out = self.root / "out"
        self.out.mkdir()
        self.cluster = SlurmCluster(self.root / "cluster")
        self.cluster.start()

    def close(self) -> None:
        try:
            self.cluster.stop()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def sbatch(self, *wrap: str, output: str | None = None) -> tuple[int, float]:
        """Submit one one-GPU job; its id and the seconds ``sbatch`` took."""
        argv = ["sbatch", "--parsable", "--gres=gpu:1", "-p", self.cluster.partition, "-J", "peer",
                "-D", str(self.out), "-o", output or str(self.out / "slurm-%j.out"), "--wrap", " ".join(wrap)]
        began = time.perf_counter()
        done = subprocess.run(argv, env=self.cluster.env, capture_output=True, text=True, timeout=60)
        took = time.perf_counter() - began
        if done.returncode != 0:
            raise RuntimeError(f"sbatch: exit {done.returncode}: {done.stderr.strip()}")
        return int(done.stdout.strip().split(";")[0]), took

    def active(self) -> int:
        """How many jobs Slurm has not finished yet."""
        return len(self.cluster.client("squeue", "-h", "-t", ACTIVE, "-o", "%i").split())

    def wait_empty(self, timeout_s: float, poll_s: float = 0.5) -> float:
        """Wait until no job is left; the wall clock (time.time) when that was seen."""
        deadline = time.monotonic() + timeout_s
        while self.active():
            if time.monotonic() > deadline:
                raise SystemExit(f"Slurm did not drain in {timeout_s:g} s; see {self.root}")
            time.sleep(poll_s)
        return time.time()

    def idle_starts(self, jobs: int) -> list[float]:
        """Seconds from calling ``sbatch`` to the job's command running, one job at a time on an idle cluster."""
        seconds = []
        for n in range(jobs):
            stamp = self.out / f"idle-{n}.out"
            began = time.time()
            self.sbatch("date", "+%s.%N", output=str(stamp))
            deadline = time.monotonic() + 60
            while not stamp.exists() or not stamp.read_text().strip():
                if time.monotonic() > deadline:
                    raise SystemExit(f"Slurm job idle-{n} did not run in 60 s; see {self.root}")
                time.sleep(0.005)
            seconds.append(float(stamp.read_text().split()[0]) - began)
            self.wait_empty(60, poll_s=0.05)
            time.sleep(0.5)
        return seconds

    def submit_burst(self, clients: int, total: int) -> tuple[float, list[float]]:
        """``total`` trivial jobs from ``clients`` concurrent ``sbatch`` loops: elapsed seconds and each call's."""
        return burst(clients, total, lambda _c: lambda _i: self.sbatch("true"))

    def completed(self) -> dict[str, int]:
        """Finished jobs by final state, from the job completion log (``JobCompType=jobcomp/filetxt``)."""
        states: dict[str, int] = {}
        log = self.cluster.root / "log" / "jobcomp.log"
        for line in log.read_text().splitlines() if log.exists() else []:
            for word in line.split():
                if word.startswith("JobState="):
                    states[word[9:]] = states.get(word[9:], 0) + 1
        return states
