"""Rota's attempts as Slurm batch jobs (pure: no Slurm, no database)."""

import json

import pytest

from scheduler.slurm.jobs import LaunchError, SlurmJob, batch_script, end_event, parse_squeue, sbatch_argv

ASSIGNMENT = {"job_id": 12, "attempt": 2, "command": "python train.py --lr 'a b'", "env": {"ROTA_JOB_ID": "12"},
              "gpus": [{"index": 0, "uuid": "U0", "share": 1.0}, {"index": 1, "uuid": "U1", "share": 1.0}],
              "time_limit_s": 3601, "limits": {"cpus": 3.5, "memory_mb": 8192, "pids": 4096}}


def test_sbatch_is_pinned_to_the_node_gpus_cpus_memory_and_time_rota_chose():
    argv = sbatch_argv(ASSIGNMENT, node="n1", gres_types={"U0": "h100", "U1": "h100"}, output="/o/x.out",
                       partition="rota")
    assert argv == ["sbatch", "--parsable", "--job-name=rota-12-2", "--nodelist=n1", "--comment=rota-job=12:2",
                    "--output=/o/x.out", "--export=NONE", "--no-requeue", "--partition=rota", "--gres=gpu:h100:2",
                    "--cpus-per-task=4", "--mem=8192M", "--time=61"]


def test_sbatch_charges_the_jobs_team_as_its_account():
    assignment = {**ASSIGNMENT, "run_as": {"uid": 20001, "gid": 20001, "team": "vision"}}
    argv = sbatch_argv(assignment, node="n1", gres_types={"U0": "h100", "U1": "h100"}, output="o", partition=None,
                       as_team=True)
    assert "--account=vision" in argv and "--uid=20001" in argv and "--gid=20001" in argv


def test_a_fraction_of_a_gpu_or_a_gpu_not_on_the_node_cannot_be_launched():
    shared = {**ASSIGNMENT, "gpus": [{"index": 0, "uuid": "U0", "share": 0.5}]}
    with pytest.raises(LaunchError, match="fraction of a GPU"):
        sbatch_argv(shared, node="n1", gres_types={"U0": "h100"}, output="o", partition=None)
    with pytest.raises(LaunchError, match="GPU U1 is not one of node n1's GPUs"):
        sbatch_argv(ASSIGNMENT, node="n1", gres_types={"U0": "h100"}, output="o", partition=None)


def test_the_script_carries_the_jobs_environment_and_quotes_its_command():
    script = batch_script(ASSIGNMENT)
    assert "export ROTA_JOB_ID=12\n" in script
    assert script.endswith("exec /bin/bash -c 'python train.py --lr '\"'\"'a b'\"'\"''\n")
    with pytest.raises(LaunchError, match="not a shell name"):
        batch_script({**ASSIGNMENT, "env": {"BAD-NAME": "x"}})


def test_squeue_matches_attempts_by_comment_and_prefers_the_active_one():
    jobs = [{"job_id": 5, "comment": "rota-job=12:2", "job_state": "RUNNING", "nodes": "n1", "exit_code": 0},
            {"job_id": 7, "comment": "rota-job=12:2", "job_state": "CANCELLED", "nodes": "n1", "exit_code": 0},
            {"job_id": 8, "comment": "someone else's", "job_state": "RUNNING"}]
    found = parse_squeue(json.dumps({"jobs": jobs}))
    assert list(found) == [(12, 2)] and found[(12, 2)].slurm_id == 5


def job(state: str, status: int = 0) -> SlurmJob:
    return SlurmJob(slurm_id=9, key=(12, 2), state=state, node="n1", required_node="n1", status=status, reason="")


def test_slurms_end_becomes_the_agents_event():
    assert end_event(job("COMPLETED"), attempt=2, stop_asked=False)["exit_code"] == 0
    failed = end_event(job("FAILED", 3 << 8), attempt=2, stop_asked=False)
    assert (failed["type"], failed["exit_code"], failed["signal"]) == ("exited", 3, None)
    killed = end_event(job("FAILED", 15), attempt=2, stop_asked=False)
    assert (killed["exit_code"], killed["signal"]) == (None, 15)
    assert "time limit" in end_event(job("TIMEOUT", 15), attempt=2, stop_asked=False)["message"]
    assert end_event(job("NODE_FAIL"), attempt=2, stop_asked=False)["type"] == "stopped"
    assert end_event(job("CANCELLED", 15), attempt=2, stop_asked=True)["type"] == "exited"  # Rota's own stop
    assert end_event(job("OUT_OF_MEMORY"), attempt=2, stop_asked=False)["signal"] == 9
