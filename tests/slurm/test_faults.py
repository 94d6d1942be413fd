"""Faults around the Slurm bridge: slurmctld restarted (with or without its state), the bridge killed right
after sbatch, a node Slurm marks down under a running job. Each recovers with nothing lost, no job run twice,
and the invariant auditor clean."""

import time

from scheduler.cycle import run_cycle
from scheduler.models import Node
from tests.reliability.helpers import assert_sound
from tests.slurm.test_launch import poll_until, poll_until_output, slurm_jobs, submitted


def test_slurmctld_restarted_mid_run_the_job_still_finishes_and_rota_follows(make_bridge, slurm, alice):
    bridge = make_bridge()
    bridge.poll()
    job = submitted(alice, "sleep 2; echo up; sleep 4; echo done", gpus=1)
    poll_until_output(bridge, job, "up")
    slurm.restart_controller()
    job = poll_until(bridge, job, ("succeeded", "failed"), timeout=60)
    assert (job.state, job.attempt, job.exit_code) == ("succeeded", 1, 0)
    assert [j["job_state"] for j in slurm_jobs(slurm, job.pk)] == ["COMPLETED"]
    assert_sound(rollup=True)


def test_slurmctld_restarted_without_its_state_the_lost_job_is_requeued_and_runs_again(make_bridge, slurm, alice):
    bridge = make_bridge()
    bridge.poll()
    job = submitted(alice, "sleep 2; echo up attempt $ROTA_ATTEMPT; sleep 300", gpus=1)
    poll_until_output(bridge, job, "up")
    [lost] = slurm_jobs(slurm, job.pk)
    slurm.restart_controller(clear_state=True)  # every job and the node's state forgotten
    job = poll_until(bridge, job, ("pending",), timeout=60)
    assert job.attempt == 2
    assert_sound(rollup=True)
    deadline = time.monotonic() + 60
    while job.state != "running" and time.monotonic() < deadline:  # placed again once the node is back
        run_cycle()
        job = poll_until(bridge, job, ("admitted", "starting", "running", "pending"), timeout=5)
        time.sleep(0.5)
    assert job.state == "running", job.pending_reason_message
    running = [j for j in slurm_jobs(slurm, job.pk) if j["job_state"] == "RUNNING"]
    assert [j["comment"] for j in running] == [f"rota-job={job.pk}:2"] and running[0]["job_id"] != lost["job_id"]
    assert_sound(rollup=True)


def test_a_bridge_killed_right_after_sbatch_never_submits_the_job_twice(make_bridge, slurm, alice):
    first = make_bridge()
    first.poll()  # registers
    job = submitted(alice, "sleep 1; echo once", gpus=1)
    first.poll()  # heartbeat: the assignment is submitted; the bridge dies before recording anything else
    assert len(slurm_jobs(slurm, job.pk)) == 1
    job = poll_until(make_bridge(), job, ("succeeded", "failed"))
    assert (job.state, job.attempt) == ("succeeded", 1)
    assert len(slurm_jobs(slurm, job.pk)) == 1
    assert_sound(rollup=True)


def test_a_node_slurm_marks_down_under_a_running_job_requeues_it_and_slurm_ends_it(make_bridge, slurm, alice,
                                                                                   enrolled):
    node, _ = enrolled
    bridge = make_bridge()
    bridge.poll()
    job = submitted(alice, "sleep 2; echo up; sleep 300", gpus=1)
    poll_until_output(bridge, job, "up")
    slurm.client("scontrol", "update", f"nodename={slurm.node}", "state=down", "reason=fan failure")
    # Slurm ends the job NODE_FAIL (never requeues it: --no-requeue) and, with ReturnToService=2, takes the
    # node back within a second; whether a poll saw the node down or only the job's end, Rota requeues it.
    job = poll_until(bridge, job, ("pending",))
    assert job.attempt == 2 and not job.allocations.filter(ended_at__isnull=True).exists()
    assert [j["job_state"] for j in slurm_jobs(slurm, job.pk)] == ["NODE_FAIL"]
    assert_sound(rollup=True)
    slurm.wait_for_node(("IDLE", "MIXED"))
    bridge.poll()
    node.refresh_from_db()
    assert node.state == Node.READY
