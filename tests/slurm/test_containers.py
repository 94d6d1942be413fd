"""The job's image under Slurm (``--containers``): the batch script starts the job's container with the node
agent's podman arguments, as the team's uid, with its limits and only its GPUs; its output reaches the portal;
a stop reaches the processes in the container, and a kill leaves no container behind (Slurm's epilog)."""

import os
import subprocess
import time

import pytest

from scheduler.agent.executors.podman import Podman
from scheduler.models import Job, JobLog, Node
from scheduler.models.jobs import StopReason
from scheduler.services.jobs import job_cancel
from tests.slurm.test_launch import poll_until, poll_until_output, slurm_jobs, submitted

pytestmark = pytest.mark.usefixtures("images")
BUSYBOX = "localhost/rota/busybox:1"
PROBE = ("echo uid=$(id -u):$(id -g) home=$HOME job=$ROTA_JOB_ID.$ROTA_ATTEMPT; "
         "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max; "
         "ls /dev | grep nvidia | tr '\\n' ' '; echo; head -n1 /etc/passwd; grep -c : /proc/net/dev; "
         "test -e /usr/bin/python3 && echo host-python || echo no-python")


def containers(name_prefix: str) -> list[str]:
    done = subprocess.run(Podman().argv("ps", "-a", "--format", "{{.Names}}"), env=Podman().env,
                          capture_output=True, text=True, check=True)
    return [n for n in done.stdout.split() if n.startswith(name_prefix)]


def test_a_job_runs_in_its_image_as_its_teams_uid_with_its_limits_and_only_its_gpus(make_bridge, slurm, alice,
                                                                                   cluster, output_dir):
    bridge = make_bridge(containers=True)
    assert bridge.poll() == {slurm.node: "registered"}
    node = Node.objects.get(name=slurm.node)
    assert (node.executor, node.isolates_tenants) == ("slurm", True)
    job = submitted(alice, PROBE, gpus=2, memory_gb=2, image=BUSYBOX)
    job = poll_until(bridge, job, ("succeeded", "failed"), timeout=60)
    out = JobLog.objects.get(job=job, attempt=1).content
    assert job.state == "succeeded", out
    uid = cluster["vision"].unix_id
    lines = out.splitlines()
    assert lines[0] == f"uid={uid}:{uid} home=/job job={job.pk}.1"
    assert lines[1] == str(2048 * 1024 * 1024)  # its memory limit, no more
    [ran] = slurm_jobs(slurm, job.pk)
    gpus = sorted(f"nvidia{i}" for i in (0, 1))  # the GPUs Slurm chose for it, and no others
    assert lines[2].split() == gpus, (lines[2], ran)
    assert lines[3] == "root:x:0:0:root:/root:/bin/sh"  # the image's own files, not the host's
    assert lines[4] == "1"  # one interface in /proc/net/dev: the loopback (network none)
    assert lines[5] == "no-python"
    assert ran["user_id"] == 0  # root's batch job: podman, not Slurm, switches to the team's uid
    output = os.stat(output_dir / f"rota-{job.pk}-1.out")
    assert (output.st_uid, output.st_mode & 0o777) == (0, 0o600)  # no user on the node reads another's output
    assert not (output_dir / f"rota-{job.pk}-1.env").exists() and not (output_dir / f"rota-{job.pk}-1.job").exists()
    assert containers(f"rota-slurm-{ran['job_id']}") == []


def test_a_cancel_reaches_the_processes_in_the_container_and_a_kill_leaves_no_container(make_bridge, slurm,
                                                                                        alice):
    bridge = make_bridge(containers=True)
    bridge.poll()
    job = submitted(alice, "trap 'echo got TERM; exit 0' TERM; sleep 2; echo ready; sleep 60 & wait", gpus=1,
                    image=BUSYBOX)
    poll_until_output(bridge, job, "ready", timeout=60)
    job_cancel(user=alice, job=job)
    job = poll_until(bridge, job, ("cancelled",))
    assert "got TERM" in JobLog.objects.get(job=job, attempt=1).content
    stubborn = submitted(alice, "trap 'echo ignoring TERM' TERM; sleep 2; echo ready; "
                                "while :; do sleep 0.1; done", gpus=1, image=BUSYBOX)
    poll_until_output(bridge, stubborn, "ready", timeout=60)
    [running] = slurm_jobs(slurm, stubborn.pk)
    assert containers(f"rota-slurm-{running['job_id']}") == [f"rota-slurm-{running['job_id']}"]
    Job.objects.filter(pk=stubborn.pk).update(stop_reason=StopReason.PREEMPT)
    stubborn = poll_until(bridge, stubborn, ("pending",), timeout=60)
    assert "ignoring TERM" in JobLog.objects.get(job=stubborn, attempt=1).content
    deadline = time.monotonic() + 30  # the epilog runs as Slurm ends the job
    while containers(f"rota-slurm-{running['job_id']}") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert containers(f"rota-slurm-{running['job_id']}") == []


def test_a_job_whose_image_is_not_on_the_node_fails_with_the_reason_in_its_output(make_bridge, slurm, alice):
    bridge = make_bridge(containers=True)
    bridge.poll()
    job = submitted(alice, "true", gpus=1, image="localhost/rota/no-such-image:1")
    job = poll_until(bridge, job, ("failed", "succeeded"), timeout=90)
    assert job.state == "failed" and job.exit_code == 125
    assert "image localhost/rota/no-such-image:1 is not on this node" in JobLog.objects.get(job=job).content
