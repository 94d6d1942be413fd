"""The portal served for real for the tests here: gunicorn with deploy/gunicorn_asgi.conf.py (as make serve runs
it) on the test database and Redis."""

import socket
import subprocess
import sys

import pytest
import requests

from tests.processes import ROOT, _stop, wait_for


@pytest.fixture
def serve(worker_env, tmp_path):
    """``serve(**env)``: the portal under gunicorn's uvicorn workers on a free loopback port (one process, two web
    threads, a 30 s heartbeat interval unless ``env`` says otherwise); returns its base URL."""
    started = []

    def start(**env: str) -> str:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        log = tmp_path / f"gunicorn-{port}.log"
        proc = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", "deploy/gunicorn_asgi.conf.py"], cwd=ROOT,
            env={**worker_env, "ROTA_BIND": f"127.0.0.1:{port}", "ROTA_WEB_WORKERS": "1", "ROTA_WEB_THREADS": "2",
                 "ROTA_NODE_HEARTBEAT_INTERVAL_S": "30", **env},
            stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
        started.append(proc)
        base = f"http://127.0.0.1:{port}"

        def answers() -> bool:
            assert proc.poll() is None, log.read_text()[-3000:]
            try:
                return requests.get(f"{base}/api/v1/", timeout=2).status_code < 500
            except requests.RequestException:
                return False

        wait_for(answers, timeout=60, interval=0.2, what="gunicorn to answer")
        return base

    yield start
    for proc in started:
        _stop(proc)
