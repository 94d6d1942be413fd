"""Health probes of a node's services: a real HTTP server answers (healthy), stops answering (unhealthy after
the threshold) or was never up (its failures count only after the start grace); the attempt past the
threshold is named once for the agent to stop."""

import http.server
import socket
import threading

import pytest

from scheduler.agent.jobs import Assignment
from scheduler.agent.probes import HEALTHY, STARTING, UNHEALTHY, HealthProbes, ProbeSettings, probe_once
from tests.agent.conftest import running, wait_until


class _Handler(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self):
        self.send_response(self.server.status if self.path == "/health" else 404)  # type: ignore[attr-defined]
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.status = 200  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def assignment(port: int, path: str = "/health", job_id: int = 7) -> Assignment:
    return Assignment.from_wire({"job_id": job_id, "attempt": 1, "command": "serve", "kind": "inference",
                                 "port": port, "env": {"ROTA_HEALTH_PATH": path}})


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def probes(clock, **settings) -> HealthProbes:
    return HealthProbes(None, ProbeSettings(period_s=1, timeout_s=1, failure_threshold=3, start_grace_s=30,
                                            **settings), clock=clock)


def run(hp: HealthProbes, clock: Clock, times: int = 1) -> None:
    for _ in range(times):
        hp.run_due()
        clock.now += 1


def test_a_probe_succeeds_on_2xx_and_names_the_status_or_the_refusal_otherwise(server):
    port = server.server_address[1]
    assert probe_once(f"http://127.0.0.1:{port}/health", 1) == ""
    assert probe_once(f"http://127.0.0.1:{port}/other", 1) == "answered HTTP 404"
    assert "refused" in probe_once(f"http://127.0.0.1:{free_port()}/health", 1).lower()


def test_an_answering_service_is_healthy_and_one_that_fails_is_named_once_past_the_threshold(server):
    clock = Clock()
    hp = probes(clock)
    a = assignment(server.server_address[1])
    hp.watch(a)
    assert hp.health(a.key) == (STARTING, "")
    run(hp, clock)
    assert hp.health(a.key) == (HEALTHY, "")
    server.status = 503
    run(hp, clock, 2)
    health, message = hp.health(a.key)
    assert health == UNHEALTHY and message == "health probe GET /health failed: answered HTTP 503"
    assert hp.failed() == []
    run(hp, clock)
    assert hp.failed() == [(a.key, "health probe GET /health failed: answered HTTP 503 (3 times in a row)")]
    assert hp.failed() == [] and hp.health(a.key) is None


def test_a_service_that_recovers_before_the_threshold_starts_counting_again(server):
    clock = Clock()
    hp = probes(clock)
    a = assignment(server.server_address[1])
    hp.watch(a)
    run(hp, clock)
    server.status = 500
    run(hp, clock, 2)
    server.status = 200
    run(hp, clock)
    server.status = 500
    run(hp, clock, 2)
    assert hp.failed() == [] and hp.health(a.key)[0] == UNHEALTHY


def test_a_starting_service_fails_without_counting_until_its_grace_is_over():
    clock = Clock()
    hp = probes(clock)
    a = assignment(free_port())
    hp.watch(a)
    run(hp, clock, 10)
    health, message = hp.health(a.key)
    assert health == STARTING and "refused" in message.lower()
    clock.now += 30
    run(hp, clock, 3)
    assert [key for key, _ in hp.failed()] == [a.key]


def test_only_listening_jobs_with_an_absolute_health_path_are_probed_and_gone_ones_are_forgotten(server):
    clock = Clock()
    hp = probes(clock)
    no_port = Assignment.from_wire({"job_id": 1, "attempt": 1, "command": "x",
                                    "env": {"ROTA_HEALTH_PATH": "/h"}})
    relative = assignment(server.server_address[1], path="health", job_id=2)
    probed = assignment(server.server_address[1], job_id=3)
    for a in (no_port, relative, probed):
        hp.watch(a)
    assert [hp.health(a.key) is not None for a in (no_port, relative, probed)] == [False, False, True]
    entries = hp.annotate([{"job_id": 3, "attempt": 1, "pid": 1, "state": "running"},
                           {"job_id": 2, "attempt": 1, "pid": 2, "state": "running"}])
    assert entries[0]["health"] == STARTING and "health" not in entries[1]
    hp.keep_only(set())
    assert hp.health(probed.key) is None


FAST = ProbeSettings(period_s=0.2, timeout_s=1, failure_threshold=3, start_grace_s=3)
SERVER = "exec python3 -m http.server {port} --bind 127.0.0.1"


def serving(port: int, health_path: str) -> dict:
    return {"kind": "inference", "port": port,
            "env": {"ROTA_JOB_ID": "1", "ROTA_PORT": str(port), "ROTA_HEALTH_PATH": health_path}}


def test_the_agent_reports_a_healthy_service_in_its_heartbeat(portal, make_agent):
    port = free_port()
    portal.assign(1, SERVER.format(port=port), **serving(port, "/"))
    with running(make_agent(service_address="127.0.0.1", probes=FAST)):
        wait_until(lambda: any(r.get("health") == HEALTHY for h in portal.heartbeats for r in h["running"]),
                   timeout=20)
    assert portal.events_of(1, "started")[0]["health"] == "starting"
    assert portal.events_of(1, "exited") == []


def test_the_agent_stops_a_service_failing_its_probe_and_reports_it_unhealthy(portal, make_agent):
    port = free_port()
    portal.assign(1, SERVER.format(port=port), **serving(port, "/no-such-health"))
    with running(make_agent(service_address="127.0.0.1", probes=FAST)):
        wait_until(lambda: portal.events_of(1, "exited"), timeout=20)
    [exited] = portal.events_of(1, "exited")
    assert exited["reason"] == "Unhealthy"
    expected = "health probe GET /no-such-health failed: answered HTTP 404 (3 times in a row)"
    assert exited["message"] == expected
    reported = [r for h in portal.heartbeats for r in h["running"] if r.get("health") == UNHEALTHY]
    assert reported and "HTTP 404" in reported[-1]["health_message"]
