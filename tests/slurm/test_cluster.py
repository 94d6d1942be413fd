"""The test cluster itself is real: jobs get the stand-in GPUs they ask for and no more than 8 run at once."""

import time

from scheduler.slurm.localcluster import SlurmCluster


def _wait_for_jobs(slurm: SlurmCluster, predicate, timeout: float = 20.0) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = dict(line.split() for line in slurm.client("squeue", "-h", "-o", "%i %T").splitlines())
        if predicate(states):
            return states
        time.sleep(0.2)
    raise AssertionError(f"jobs did not reach the expected states: {states}")


def test_it_registers_the_node_with_its_gpus_features_and_partition(slurm):
    line = slurm.client("sinfo", "-h", "-N", "-o", "%N|%T|%G|%c|%m|%f|%P").strip()
    assert line == "slurm-gpu-01|idle|gpu:h100:8|64|256000|ib,nvme|gpu*"


def test_it_gives_a_job_the_gpus_it_asks_for(slurm, tmp_path):
    out = tmp_path / "job.out"
    slurm.client("sbatch", "--wait", "--gres=gpu:h100:2", "-o", str(out), "--wrap", "echo $CUDA_VISIBLE_DEVICES")
    assert out.read_text().strip() == "0,1"


def test_it_runs_at_most_eight_one_gpu_jobs_at_once(slurm):
    for _ in range(9):
        slurm.client("sbatch", "--gres=gpu:h100:1", "--wrap", "sleep 30", "-o", "/dev/null")
    states = _wait_for_jobs(slurm, lambda s: list(s.values()).count("RUNNING") == 8)
    assert sorted(states.values()) == ["PENDING"] + ["RUNNING"] * 8
