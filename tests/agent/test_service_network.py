"""Container networking of services: a listening job (inference, notebook) on a node with a service address
joins its team's isolated bridge network and is published on that address only, so the portal reaches it;
other jobs keep no network; another team's container cannot reach it (same probe from its own team works)."""

import socket
import time
import urllib.request
from pathlib import Path

import pytest

from scheduler.agent.executors.container import ContainerExecutor
from scheduler.agent.jobs import Assignment
from tests.agent.conftest import drain
from tests.agent.test_isolation import BUSYBOX, NLP, PYTHON, VISION, run

SERVE = "exec python3 -m http.server $ROTA_PORT"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def assignment(job_id: int, command: str, run_as: dict, **fields) -> Assignment:
    """As the portal sends it: a listening job has its ``port`` also in its env as ROTA_PORT."""
    env = {"ROTA_PORT": str(fields["port"])} if fields.get("port") else {}
    return Assignment.from_wire({"job_id": job_id, "attempt": 1, "command": command, "grace_period_s": 0.5,
                                 "image": BUSYBOX, "run_as": run_as, "env": env, **fields})


def answers(port: int, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1) as answer:
                return answer.status == 200
        except OSError:
            time.sleep(0.2)
    return False


@pytest.fixture
def service_executor(tmp_path: Path, images: None):
    ex = ContainerExecutor(tmp_path / "work", fake_gpus=True, service_address="127.0.0.1")
    yield ex
    drain(ex)


def ip_of(ex: ContainerExecutor, job_id: int) -> str:
    name = ex.container_name(job_id, 1)
    return ex.podman.call("inspect", "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
                          name).strip()


def test_a_service_is_published_on_the_service_address_and_other_jobs_have_no_network(
    service_executor, tmp_path
):
    port = free_port()
    started = service_executor.start(assignment(1, SERVE, VISION, kind="inference", port=port, image=PYTHON))
    assert started.type == "started"
    assert answers(port)
    _, log = run(service_executor, assignment(2, "cat /proc/net/dev", VISION, kind="training"))
    assert "eth0" not in log and "lo:" in log
    listening = assignment(3, "cat /proc/net/dev", VISION, kind="inference", port=free_port())
    _, log = run(service_executor, listening)
    assert "eth0" in log  # the control: a service's container has its network
    no_address = ContainerExecutor(tmp_path / "other", fake_gpus=True)  # no --service-address: none either
    other = free_port()
    no_address.start(assignment(4, SERVE, VISION, kind="inference", port=other, image=PYTHON))
    try:
        assert not answers(other, timeout=3)
    finally:
        drain(no_address)


def test_another_teams_container_cannot_reach_a_service_but_its_own_team_can(service_executor):
    port = free_port()
    service_executor.start(assignment(11, SERVE, VISION, kind="inference", port=port, image=PYTHON))
    assert answers(port)
    address = f"{ip_of(service_executor, 11)}:{port}"
    probe = (f"python3 -c \"import urllib.request; urllib.request.urlopen('http://{address}/', timeout=3)\" "
             "&& echo RESULT=reached || echo RESULT=unreachable")
    outsider = assignment(12, probe, NLP, kind="inference", port=free_port(), image=PYTHON)
    _, log = run(service_executor, outsider)
    assert "RESULT=unreachable" in log, log
    teammate = assignment(13, probe, VISION, kind="inference", port=free_port(), image=PYTHON)
    _, log = run(service_executor, teammate)
    assert "RESULT=reached" in log, log
