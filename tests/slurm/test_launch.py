"""Rota decides, Slurm launches: a job Rota places on a Slurm node runs as an sbatch pinned to it, its states
and output come back through the node API, and stops go through scancel with the grace signal first."""

import json
import os
import time

from scheduler.cycle import run_cycle
from scheduler.models import Job, JobLog, Node
from scheduler.models.jobs import StopReason
from scheduler.services.jobs import job_cancel, job_submit
from scheduler.slurm.bridge import Bridge
from scheduler.slurm.commands import SlurmError


def poll_until(bridge: Bridge, job: Job, states: tuple[str, ...], timeout: float = 40.0) -> Job:
    """Poll as ``Bridge.run`` does (a pass that Slurm does not answer is skipped) until the job is in
    ``states``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            bridge.poll()
        except SlurmError:
            pass
        job.refresh_from_db()
        if job.state in states:
            return job
        time.sleep(0.2)
    raise AssertionError(f"job {job.pk} is {job.state}, not {states}, after {timeout}s")


def poll_until_output(bridge: Bridge, job: Job, text: str, timeout: float = 40.0) -> None:
    """Poll until the job's output in the portal shows ``text``. The commands print it two seconds in: a
    cancel that reaches a batch job within about half a second of its launch leaves Slurm 22.05 waiting some
    100 s before it frees the node (the bridge keeps resending the kill; the tests should not wait)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        bridge.poll()
        if text in "".join(JobLog.objects.filter(job=job).values_list("content", flat=True)):
            return
        time.sleep(0.2)
    raise AssertionError(f"job {job.pk} never printed {text!r}")


def slurm_jobs(slurm, job_id: int) -> list[dict]:
    """Slurm's jobs for a Rota job (the session's cluster keeps earlier tests' ended jobs for MinJobAge)."""
    return [j for j in json.loads(slurm.client("squeue", "--json", "--states=all"))["jobs"]
            if j["comment"].startswith(f"rota-job={job_id}:")]


def submitted(user, command: str, **request) -> Job:
    job = job_submit(user=user, name="through-slurm", command=command, gpu_model="h100-80gb", **request)
    run_cycle()
    job.refresh_from_db()
    assert job.state == "admitted", job.pending_reason_message
    return job


def test_a_job_runs_to_success_through_slurm_with_its_output_in_the_portal(make_bridge, slurm, alice):
    bridge = make_bridge()
    bridge.poll()  # registers the node
    job = submitted(alice, "echo hello from $ROTA_JOB_ID on $CUDA_VISIBLE_DEVICES", gpus=2, cpus=3, memory_gb=2,
                    time_limit_minutes=30)
    job = poll_until(bridge, job, ("succeeded", "failed"))
    assert (job.state, job.exit_code) == ("succeeded", 0)
    assert JobLog.objects.get(job=job, attempt=1).content == f"hello from {job.pk} on 0,1\n"
    [ran] = slurm_jobs(slurm, job.pk)
    assert ran["comment"] == f"rota-job={job.pk}:1" and ran["job_state"] == "COMPLETED"
    assert (ran["required_nodes"], ran["tres_per_node"], ran["cpus"]) == (slurm.node, "gres:gpu:h100:2", 3)
    assert (ran["memory_per_node"], ran["time_limit"]) == (2048, 30)
    assert list(job.transitions.values_list("to_state", flat=True)) == [
        "pending", "admitted", "starting", "running", "succeeded"]


def test_the_job_runs_as_its_teams_uid_and_only_that_uid_owns_its_output(make_bridge, slurm, alice, cluster,
                                                                           output_dir):
    bridge = make_bridge()
    bridge.poll()
    uid = cluster["vision"].unix_id
    job = poll_until(bridge, submitted(alice, "echo $(id -u):$(id -g)", gpus=1), ("succeeded", "failed"))
    assert JobLog.objects.get(job=job, attempt=1).content == f"{uid}:{uid}\n"
    output = os.stat(output_dir / f"rota-{job.pk}-1.out")
    assert (output.st_uid, output.st_gid, output.st_mode & 0o777) == (uid, uid, 0o600)
    assert slurm_jobs(slurm, job.pk)[0]["user_id"] == uid


def test_a_root_bridge_isolates_tenants_and_one_that_cannot_submit_as_teams_is_refused_where_required(
        make_bridge, slurm, settings):
    settings.ROTA_REQUIRE_ISOLATION = True
    not_root = make_bridge()
    not_root.launcher.as_team = False  # what a bridge that is not root finds
    assert not_root.poll()[slurm.node].startswith("rejected: ")
    assert make_bridge().poll() == {slurm.node: "registered"}
    node = Node.objects.get(name=slurm.node)
    assert (node.executor, node.isolates_tenants, node.state) == ("slurm", True, Node.READY)


def test_a_team_whose_uid_slurm_does_not_know_gets_its_job_refused_with_the_reason(make_bridge, alice, cluster):
    bridge = make_bridge()
    bridge.poll()
    Team = type(cluster["vision"])
    Team.objects.filter(pk=cluster["vision"].pk).update(unix_id=29_876)  # no such user on the host
    job = poll_until(bridge, submitted(alice, "true", gpus=1), ("pending", "failed"))
    assert "uid 29876 of the job's team is not a user on the bridge host" in job.transitions.last().cause


def test_a_bridge_restarted_after_submitting_never_submits_the_job_twice(make_bridge, slurm, alice):
    bridge = make_bridge()
    bridge.poll()
    job = submitted(alice, "sleep 2; echo up; sleep 30", gpus=1)
    poll_until_output(bridge, job, "up")
    restarted = make_bridge()
    for _ in range(3):
        restarted.poll()
    assert [j["job_id"] for j in slurm_jobs(slurm, job.pk)] == [restarted.launcher.attempts[(job.pk, 1)].slurm_id]


def test_a_cancel_sends_the_grace_signal_through_scancel_and_the_job_ends_cancelled(make_bridge, slurm, alice):
    bridge = make_bridge()
    bridge.poll()
    job = submitted(alice, "trap 'echo got TERM; exit 0' TERM; sleep 2; echo ready; sleep 60 & wait", gpus=1)
    poll_until_output(bridge, job, "ready")
    job_cancel(user=alice, job=job)
    job = poll_until(bridge, job, ("cancelled",))
    assert "got TERM" in JobLog.objects.get(job=job, attempt=1).content
    assert [j["job_state"] for j in slurm_jobs(slurm, job.pk)] == ["COMPLETED"]  # it exited 0 on its own


def test_a_preempted_job_that_ignores_the_grace_signal_is_killed_after_the_grace_period_and_requeued(
        make_bridge, slurm, alice):
    bridge = make_bridge()
    bridge.poll()
    loop = "for i in $(seq 600); do sleep 0.1; done"
    job = submitted(alice, f"trap 'echo ignoring TERM' TERM; sleep 2; echo ready; {loop}", gpus=1)
    poll_until_output(bridge, job, "ready")
    # What the cycle's dispatch writes for a victim (scheduler/dispatch.py): the node is asked to stop it.
    Job.objects.filter(pk=job.pk).update(stop_reason=StopReason.PREEMPT)
    started = time.monotonic()
    job = poll_until(bridge, job, ("pending",))
    assert time.monotonic() - started >= job.priority_class.grace_period_s  # killed only after the grace
    assert job.attempt == 2 and "ignoring TERM" in JobLog.objects.get(job=job, attempt=1).content
    assert slurm_jobs(slurm, job.pk)[0]["job_state"] in ("CANCELLED", "FAILED")


def test_a_job_cancelled_in_slurm_behind_rotas_back_is_requeued(make_bridge, slurm, alice):
    bridge = make_bridge()
    bridge.poll()
    job = submitted(alice, "sleep 2; echo up; sleep 60", gpus=1)
    poll_until_output(bridge, job, "up")
    slurm.client("scancel", str(slurm_jobs(slurm, job.pk)[0]["job_id"]))
    job = poll_until(bridge, job, ("pending",))
    assert job.attempt == 2 and "cancelled in Slurm" in job.transitions.last().cause


def test_a_rota_job_in_slurm_that_rota_does_not_list_is_cancelled(make_bridge, slurm):
    bridge = make_bridge()
    bridge.poll()
    slurm.client("sbatch", f"--nodelist={slurm.node}", "--comment=rota-job=999999:1", "-o", "/dev/null",
                 "--wrap", "sleep 60")
    deadline = time.monotonic() + 20
    while slurm_jobs(slurm, 999999)[0]["job_state"] != "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(2)  # well past its launch (see poll_until_output)
    bridge.poll()
    deadline = time.monotonic() + 10
    while slurm_jobs(slurm, 999999)[0]["job_state"] not in ("CANCELLED",) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert slurm_jobs(slurm, 999999)[0]["job_state"] == "CANCELLED"
