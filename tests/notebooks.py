"""Fixtures for notebook tests: the portal served over ASGI (``portal.asgi``, as ``make serve`` and ``make dev``
serve it, with the notebook proxy) by uvicorn in this process, and a node agent on the container executor with
the notebook image built (``scripts/build-images.sh``)."""

import random
import socket
import subprocess
import threading
import time

import pytest
import uvicorn
from django.test import Client

from scheduler.models import Job, Node
from tests.processes import ROOT, wait_for


@pytest.fixture(scope="session")
def notebook_image():
    """``localhost/rota/notebook:1`` (JupyterLab), built once; Podman must be installed: fails, not skips."""
    subprocess.run([str(ROOT / "scripts" / "build-images.sh")], check=True, cwd=ROOT, timeout=900)


@pytest.fixture
def asgi_portal(transactional_db, settings):
    """The whole portal over ASGI on a free loopback port (uvicorn in a thread); yields its base URL. Its
    threads close their database connections after each request (none left for the test database's drop)."""
    settings.DATABASES["default"]["CONN_MAX_AGE"] = 0  # the very dict the connections read
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config("portal.asgi:application", lifespan="off", log_level="warning", ws="websockets-sansio")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "uvicorn did not start"
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(15)
    sock.close()


@pytest.fixture
def notebook_node(cluster, celery_worker, start_agent, settings, notebook_image):
    """node-h100 with a real agent on the container executor. Its service address is a loopback address of its
    own (127.x.y.z), and its ports are the test's own (``service_ports`` in tests/processes.py)."""
    settings.ROTA_NODE_HEARTBEAT_INTERVAL_S = 1
    node = cluster["nodes"][0]
    address = f"127.{random.randint(1, 254)}.{random.randint(1, 254)}.{random.randint(1, 254)}"
    start_agent(node, executor="container", extra=("--service-address", address))
    wait_for(lambda: Node.objects.get(pk=node.pk).registered_at, timeout=30, what="the agent to register")
    return node


def session_cookie(user) -> str:
    """A ``Cookie`` header that signs ``user`` in (a real session in the database)."""
    client = Client()
    client.force_login(user)
    return "; ".join(f"{name}={morsel.value}" for name, morsel in client.cookies.items())


def wait_running_notebook(job_id: int, timeout: float = 120) -> Job:
    """The notebook job once it runs and its node reported where its server listens."""
    return wait_for(lambda: Job.objects.filter(pk=job_id, state="running").exclude(service_address="").first(),
                    timeout=timeout, what=f"notebook {job_id} to run")
