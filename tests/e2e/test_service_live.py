"""A real inference service through Rota, end to end: the demo image's HTTP inference server
(``localhost/rota/serve:1``, scripts/images/serve.py) runs as two replicas in containers on a real node agent
(container executor, root, Podman), each on its team's bridge network with its port published on the node's
service address only. Callers reach it through ``/serve/<team>/<service>/`` with a key and are refused without
one; a replica killed or hung is noticed (its exit, its health probe), traffic goes to the healthy one
meanwhile, and the replica is healed (restarted) with the cause on its job page."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client
from rest_framework.test import APIClient

from scheduler.audit import audit
from scheduler.models import Job, Node, PriorityClass, Quota, ServiceKey
from scheduler.models.jobs import JobTransition
from tests.e2e.test_containers import images  # noqa: F401  (the session fixture that builds the demo images)
from tests.processes import ROOT, _stop, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

IMAGE = "localhost/rota/serve:1"
PROBES = ("--service-address", "127.0.0.1", "--probe-period", "0.5", "--probe-timeout", "1",
          "--probe-failures", "3", "--probe-start-grace", "30")


@pytest.fixture
def celery_beat(worker_env, tmp_path):
    """A real Celery beat: the periodic scheduling cycle (every second here) starts a restarted replica once
    its backoff is over, and the autoscaler runs on its own period, as under ``make serve``."""
    env = {**worker_env, "ROTA_CYCLE_INTERVAL_S": "1", "ROTA_AUTOSCALE_INTERVAL_S": "2"}
    log = open(tmp_path / "beat.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "celery", "-A", "portal", "beat", "--loglevel=INFO",
                             "--schedule", str(tmp_path / "beat-schedule")],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    yield proc
    _stop(proc)
    log.close()


@pytest.fixture
def service_node(cluster, celery_worker, celery_beat, start_agent, settings, images):  # noqa: F811
    """node-h100 with a real agent on the container executor that publishes services on 127.0.0.1."""
    settings.ROTA_NODE_HEARTBEAT_INTERVAL_S = 1
    PriorityClass.objects.update(grace_period_s=2)
    # replicas are production-inference (not preemptible): they start only within the team's guaranteed quota
    Quota.objects.filter(team=cluster["vision"], gpu_model=cluster["h100"]).update(guaranteed=4, limit=4)
    node = cluster["nodes"][0]
    start_agent(node, executor="container", extra=PROBES)
    wait_for(lambda: Node.objects.get(pk=node.pk).registered_at, timeout=30, what="the agent to register")
    return node


def submit_replicas(user, service: str, count: int) -> list[int]:
    api = APIClient()
    api.force_authenticate(user)
    ids = []
    for i in range(1, count + 1):
        answer = api.post("/api/v1/jobs/", {
            "name": f"{service}-{i}", "kind": "inference", "gpu_model": "h100-80gb", "image": IMAGE,
            "command": "exec python3 /opt/rota/serve.py", "env": {"ROTA_HEALTH_PATH": "/health"},
        }, format="json")
        assert answer.status_code == 201, answer.json()
        ids.append(answer.json()["id"])
    return ids


def healthy(ids) -> bool:
    rows = Job.objects.filter(pk__in=ids, state="running", service_health="healthy").exclude(service_address="")
    return rows.count() == len(ids)


def generate(client, raw, prompt="hello rota world"):
    return client.post("/serve/vision/llm/v1/generate", data=json.dumps({"prompt": prompt}),
                       content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {raw}")


def server_pid(job: Job) -> int:
    """The host pid of the replica's python server: a child of its container's init (the container is the one
    of this job that publishes its address: other agents on this host may run a job of the same id)."""
    env = {**os.environ, "CONTAINERS_CONF": str(ROOT / "deploy/podman/containers.conf")}
    rows = subprocess.run(["podman", "ps", "--filter", f"label=rota.job={job.pk}", "--format",
                           "{{.Names}} {{.Ports}}"], env=env, capture_output=True, text=True, check=True).stdout
    names = [line.split()[0] for line in rows.splitlines() if f"{job.service_address}->" in line]
    assert len(names) == 1, rows
    state = subprocess.run(["podman", "inspect", "--format", "{{.State.Pid}}", names[0]], env=env,
                           capture_output=True, text=True, check=True).stdout
    pending = [int(state)]
    while pending:
        pid = pending.pop()
        if b"serve.py" in Path(f"/proc/{pid}/cmdline").read_bytes() and b"rota-init" not in Path(
                f"/proc/{pid}/cmdline").read_bytes():
            return pid
        for task in Path(f"/proc/{pid}/task").iterdir():
            pending += [int(c) for c in (task / "children").read_text().split()]
    raise AssertionError(f"no serve.py process in job {job.pk}'s container")


def replicas_reached(client, raw, times=6) -> set:
    seen = set()
    for _ in range(times):
        answer = generate(client, raw)
        assert answer.status_code == 200, answer.content
        seen.add(answer.json()["replica"])
    return seen


def test_two_replicas_answer_with_a_key_only_and_a_killed_one_is_healed_while_the_other_serves(
    alice, service_node
):
    ids = submit_replicas(alice, "llm", 2)
    wait_for(lambda: healthy(ids), timeout=90, what="both replicas to run and pass their health probe")
    client = Client()
    assert generate(client, "").status_code == 401
    assert generate(client, "rs_wrong").status_code == 401
    _, raw = ServiceKey.issue(Job.objects.get(pk=ids[0]).team, "llm", alice)
    answer = generate(client, raw, "the quick fox")
    assert answer.json()["completion"] == "fox quick the" and answer.json()["tokens"] == 3
    assert replicas_reached(client, raw) == {"llm-1", "llm-2"}

    victim = Job.objects.get(pk=ids[0])
    os.kill(server_pid(victim), signal.SIGKILL)
    wait_for(lambda: Job.objects.get(pk=victim.pk).attempt == 2, timeout=30, what="the killed replica's end")
    assert replicas_reached(client, raw) == {"llm-2"}  # meanwhile: the healthy one serves every request
    wait_for(lambda: healthy(ids), timeout=90, what="the killed replica to be restarted and healthy again")
    assert replicas_reached(client, raw) == {"llm-1", "llm-2"}
    causes = list(JobTransition.objects.filter(job_id=victim.pk).values_list("cause", flat=True))
    assert any(c.startswith("service failed (killed by signal 9): restarting in") for c in causes), causes


def test_a_hung_replica_fails_its_probe_gets_no_traffic_and_is_restarted_with_the_cause_on_its_page(
    alice, service_node
):
    ids = submit_replicas(alice, "llm", 2)
    wait_for(lambda: healthy(ids), timeout=90, what="both replicas to run and pass their health probe")
    _, raw = ServiceKey.issue(Job.objects.get(pk=ids[0]).team, "llm", alice)
    client = Client()
    victim = Job.objects.get(pk=ids[1])
    os.kill(server_pid(victim), signal.SIGSTOP)  # alive, but answers nothing: only the probe can tell
    wait_for(lambda: Job.objects.get(pk=victim.pk).service_health == "unhealthy", timeout=30,
             what="the probe to find the hung replica unhealthy")
    assert replicas_reached(client, raw) == {"llm-1"}
    wait_for(lambda: Job.objects.get(pk=victim.pk).attempt == 2, timeout=60, what="the hung replica's restart")
    wait_for(lambda: healthy(ids), timeout=90, what="the restarted replica to be healthy")
    assert replicas_reached(client, raw) == {"llm-1", "llm-2"}

    page = Client()
    page.force_login(alice)
    html = page.get(f"/jobs/{victim.pk}/").content.decode()
    assert "service Unhealthy: health probe GET /health failed" in html
    assert audit() == []
