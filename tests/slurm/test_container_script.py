"""The batch script of a job run in its image under Slurm (pure: files only, no Slurm, no podman run)."""

import os
import shlex

import pytest

from scheduler.agent.executors.container import INIT
from scheduler.slurm.containers import SlurmContainers, container_end
from scheduler.slurm.jobs import LaunchError

ASSIGNMENT = {"job_id": 12, "attempt": 2, "command": "python train.py --lr 'a b'",
              "image": "localhost/rota/python:3.11", "env": {"WANDB_MODE": "offline"},
              "limits": {"cpus": 3.5, "memory_mb": 8192, "pids": 4096}}


def test_the_script_runs_the_agents_podman_arguments_as_the_team_with_the_gpus_slurm_chose(tmp_path):
    containers = SlurmContainers(tmp_path, device_dir=tmp_path / "dev")
    script = containers.script(ASSIGNMENT, (12, 2), 20001, 20002)
    run = script.splitlines()[-1]
    assert run.startswith('exec podman run --name "$ROTA_CONTAINER" --pull never')
    words = shlex.split(run.replace('"$ROTA_CONTAINER"', "NAME").replace('"${ROTA_DEVICES[@]}"', "DEVICES"))
    for option in (["--user", "20001:20002"], ["--cap-drop", "all"], ["--network", "none"], ["--cpus", "3.5"],
                   ["--memory", "8192m"], ["--memory-swap", "8192m"], ["--pids-limit", "4096"], ["--rm"],
                   ["--env-file", str(tmp_path / "rota-12-2.env")], ["--env", "CUDA_VISIBLE_DEVICES"]):
        assert any(words[i:i + len(option)] == option for i in range(len(words))), option
    assert words[-6:] == ["localhost/rota/python:3.11", "/bin/sh", "-c", INIT, "rota-init", ASSIGNMENT["command"]]
    assert "DEVICES" in words and "SLURM_JOB_GPUS" in script and str(tmp_path / "dev") in script
    env = (tmp_path / "rota-12-2.env").read_text().splitlines()
    assert env == ["WANDB_MODE=offline", "ROTA_JOB_ID=12", "ROTA_ATTEMPT=2", "HOME=/job"]
    assert os.stat(tmp_path / "rota-12-2.env").st_mode & 0o777 == 0o600
    job_dir = os.stat(tmp_path / "rota-12-2.job")
    assert (job_dir.st_uid, job_dir.st_gid, job_dir.st_mode & 0o777) == (20001, 20002, 0o700)
    containers.clean((12, 2))
    assert not (tmp_path / "rota-12-2.env").exists() and not (tmp_path / "rota-12-2.job").exists()


def test_a_job_without_an_image_gets_the_default_and_bad_input_is_refused_naming_it(tmp_path):
    assert "localhost/rota/python:3.11 /bin/sh" in SlurmContainers(tmp_path).script(
        {**ASSIGNMENT, "image": None}, (1, 1), 20001, 20001)
    with pytest.raises(LaunchError, match="image: the job names no image"):
        SlurmContainers(tmp_path, default_image=None).script({**ASSIGNMENT, "image": None}, (1, 1), 20001, 20001)
    with pytest.raises(LaunchError, match="env WANDB_MODE: a value with a line break"):
        SlurmContainers(tmp_path).script({**ASSIGNMENT, "env": {"WANDB_MODE": "a\nb"}}, (1, 1), 20001, 20001)


def test_podmans_128_plus_n_is_the_signal_n():
    assert container_end({"type": "exited", "exit_code": 137, "signal": None}) == {
        "type": "exited", "exit_code": None, "signal": 9}
    assert container_end({"type": "exited", "exit_code": 3, "signal": None})["exit_code"] == 3
