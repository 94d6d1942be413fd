"""``make serve`` for real: scripts/serve.sh on the test database and Redis starts gunicorn with its (uvicorn)
workers, Celery, beat and the demo node agents under production settings, and a job submitted over the API
runs; the notebook proxy (HTTP and websockets) answers on the same address."""

import os
import re
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import pytest
import requests
from django.db import connection
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from scheduler.models import Node
from tests.processes import wait_for

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _descendants(pid: int) -> list[int]:
    found = []
    for child in _children(pid):
        found += [child, *_descendants(child)]
    return found


def _cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def _nice(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16])  # field 19, after the name


@pytest.fixture
def served(worker_env, tmp_path):
    """``scripts/serve.sh`` on a free port; yields its base URL, stopped (its whole process group) after."""
    port, node_port, control_port = _free_port(), _free_port(), _free_port()
    env = {**worker_env, "PORT": str(port), "ROTA_NODE_BIND": f"127.0.0.1:{node_port}",
           "ROTA_CONTROL_BIND": f"127.0.0.1:{control_port}",
           "ROTA_VAR_DIR": str(tmp_path / "var"), "ROTA_STATIC_ROOT": str(tmp_path / "static"),
           "ROTA_WEB_WORKERS": "2", "ROTA_NODE_WEB_WORKERS": "1", "ROTA_WEB_THREADS": "4", "ROTA_CELERY_WORKERS": "1"}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env.pop("SECRET_KEY", None)
    log = open(tmp_path / "serve.log", "w")
    proc = subprocess.Popen([str(ROOT / "scripts" / "serve.sh")], cwd=ROOT, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    base, nodes, control = (f"http://127.0.0.1:{p}" for p in (port, node_port, control_port))

    def answers():
        assert proc.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
        try:
            return all(requests.get(f"{url}/login/", timeout=2).status_code == 200 for url in (base, nodes, control))
        except requests.RequestException:
            return False

    try:
        wait_for(answers, timeout=120, interval=0.5, what="make serve to answer")
        yield {"base": base, "nodes": nodes, "control": control, "pid": proc.pid, "log": tmp_path / "serve.log",
               "var": tmp_path / "var"}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def test_it_serves_the_portal_with_gunicorn_workers_production_settings_and_hashed_static_files(served):
    base = served["base"]
    login = requests.get(f"{base}/login/", timeout=10)
    assert login.headers["Server"] == "uvicorn"  # gunicorn's uvicorn workers (deploy/gunicorn_asgi.conf.py)
    # honcho -> (a shell) -> the gunicorn master -> the two workers asked for
    gunicorns = {pid: _cmdline(pid) for pid in _descendants(served["pid"])
                 if "gunicorn -c deploy/gunicorn_" in _cmdline(pid) and "python" in _cmdline(pid).split()[0]}
    masters = {re.search(r"gunicorn_(\w+)\.conf\.py", cmd).group(1): pid for pid, cmd in gunicorns.items()
               if set(_children(pid)) & set(gunicorns)}
    assert sorted(masters) == ["asgi", "control", "nodes"]
    masters["web"] = masters.pop("asgi")
    assert len(_children(masters["web"])) == 2
    # the node agents' server apart: its own processes, which yield the cores to users' (nice 5 against ours)
    assert len(_children(masters["nodes"])) == 1
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    assert [_nice(pid) for pid in (masters["web"], *_children(masters["web"]))] == [ours] * 3
    assert [_nice(pid) for pid in (masters["nodes"], *_children(masters["nodes"]))] == [max(ours, 5)] * 2
    # the node-control server, for the nodes' heartbeats: one worker, at users' priority
    assert [_nice(pid) for pid in (masters["control"], *_children(masters["control"]))] == [ours] * 2
    # and its session's: the kernel shares the cores between sessions (autogroups) before it weighs a nice, and
    # honcho starts each process in a session of its own
    autogroup = Path(f"/proc/{masters['nodes']}/autogroup")
    if autogroup.exists():  # a kernel with autogroups, as this machine's
        assert autogroup.read_text().split()[-1] == "5"
        assert Path(f"/proc/{masters['web']}/autogroup").read_text().split()[-1] == "0"
    assert requests.post(f"{served['nodes']}/api/v1/node/heartbeat/", json={}, timeout=10).status_code == 401
    # collected under hashed names and served with far-future caching, compressed
    css = re.search(r'/static/css/rota\.[0-9a-f]{12}\.css', login.text)
    assert css, login.text[:2000]
    static = requests.get(base + css.group(0), headers={"Accept-Encoding": "gzip"}, timeout=10)
    assert static.status_code == 200
    assert "immutable" in static.headers["Cache-Control"]
    assert static.headers.get("Content-Encoding") == "gzip"
    # DEBUG is off: a missing page is the plain 404, not Django's debug page
    missing = requests.get(f"{base}/no-such-page/", timeout=10)
    assert missing.status_code == 404 and "URLconf" not in missing.text
    # the secret key was made once for this machine, readable by its owner only
    assert (served["var"] / "secret_key").stat().st_mode & 0o077 == 0
    # the notebook proxy on the same address: a visitor is sent to sign in, a websocket refused with 404
    notebook = requests.get(f"{base}/notebooks/1/lab", allow_redirects=False, timeout=10)
    assert notebook.status_code == 302 and notebook.headers["Location"].startswith("/login/?next=")
    with pytest.raises(InvalidStatus) as refused:
        connect(f"{base.replace('http://', 'ws://')}/notebooks/1/api/kernels/k/channels", open_timeout=10)
    assert refused.value.response.status_code == 404


def test_a_job_submitted_to_the_served_portal_runs_on_a_demo_node_agent(served):
    base = served["base"]
    token = requests.post(f"{base}/api/v1/auth/token/", json={"username": "alice", "password": "rota-demo-2026"},
                          timeout=10).json()["token"]
    headers = {"Authorization": f"Token {token}"}
    job = requests.post(f"{base}/api/v1/jobs/", json={"name": "served", "gpus": 1, "gpu_model": "h100-80gb",
                                                      "command": "echo served-by-gunicorn"},
                        headers=headers, timeout=10)
    assert job.status_code == 201, job.text
    url = f"{base}/api/v1/jobs/{job.json()['id']}/"

    def finished():
        state = requests.get(url, headers=headers, timeout=10).json()["state"]
        return state if state in ("succeeded", "failed") else None

    assert wait_for(finished, timeout=60, what="the job to finish") == "succeeded", served["log"].read_text()[-3000:]
    logs = requests.get(f"{url}logs/", headers=headers, timeout=10)
    assert "served-by-gunicorn" in logs.text
    agents = [_cmdline(pid) for pid in _descendants(served["pid"]) if "-m scheduler.agent" in _cmdline(pid)]
    assert agents and all(f"--portal {served['nodes']} " in cmd for cmd in agents), agents  # the nodes' server
    # told at register, the agents heartbeat at the control server: its process has sessions on the database
    heartbeats = Node.objects.exclude(registered_at=None)
    assert heartbeats.count() == len([cmd for cmd in agents if not cmd.startswith("/bin/sh")])
    seq = {name: seq for name, seq in heartbeats.values_list("name", "heartbeat_seq")}
    wait_for(lambda: all(s > seq[n] for n, s in heartbeats.values_list("name", "heartbeat_seq")), timeout=30,
             what="a heartbeat of each agent")
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                       "AND application_name = 'rota-control'")
        assert cursor.fetchone()[0] > 0
    if os.geteuid() == 0 and shutil.which("podman"):  # the demo agents' container executor: its images ensured
        assert "images: localhost/rota/python:3.11" in served["log"].read_text()
