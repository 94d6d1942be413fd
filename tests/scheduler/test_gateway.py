"""The inference gateway /serve/<team>/<service>/…: real HTTP servers as replicas, reached only with an unrevoked
key of that very service, in turn over the running replicas, skipping one that stopped answering."""

import subprocess
import sys
import time
import urllib.request

import pytest

from scheduler.models import Job, ServiceKey, ServiceTraffic
from scheduler.models.gateway import hash_key
from scheduler.models.jobs import JobState
from scheduler.services.jobs import job_submit

pytestmark = pytest.mark.django_db

REPLICA = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = f"{sys.argv[1]} {self.path}".encode()
        self.send_response(200); self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)
    do_POST = do_GET
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[2])), H).serve_forever()
"""


def _wait_listening(port: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1)
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"replica on {port} never answered")


@pytest.fixture
def replica_servers():
    procs = {}

    def start(name: str, port: int) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", REPLICA, name, str(port)])
        procs[port] = proc
        _wait_listening(port)
        return proc

    yield start
    for proc in procs.values():
        proc.terminate()
        proc.wait(10)


def running_replica(user, name: str, port: int) -> Job:
    job = job_submit(user=user, name=name, kind="inference", command="python serve.py", gpu_model="h100-80gb",
                     team="vision")
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, service_address=f"127.0.0.1:{port}")
    return job


def test_a_key_reaches_the_replicas_in_turn_and_no_key_is_refused(alice, client, replica_servers):
    replica_servers("r1", 8121)
    replica_servers("r2", 8122)
    first = running_replica(alice, "llm-1", 8121)
    running_replica(alice, "llm-2", 8122)
    key, raw = ServiceKey.issue(first.team, "llm", alice)
    assert key.key_hash == hash_key(raw) and raw not in (key.key_hash, key.prefix)

    assert client.get("/serve/vision/llm/v1/generate").status_code == 401
    assert client.get("/serve/vision/llm/v1/generate", HTTP_AUTHORIZATION="Bearer rs_wrong").status_code == 401
    answers = [client.get("/serve/vision/llm/v1/generate?x=1", HTTP_AUTHORIZATION=f"Bearer {raw}")
               for _ in range(4)]
    assert [a.status_code for a in answers] == [200] * 4
    bodies = sorted(a.content.decode() for a in answers)
    assert bodies == ["r1 /v1/generate?x=1"] * 2 + ["r2 /v1/generate?x=1"] * 2
    posted = client.post("/serve/vision/llm/score", data=b"{}", content_type="application/json",
                         HTTP_X_ROTA_KEY=raw)
    assert posted.status_code == 200 and posted.content.decode().endswith(" /score")


def test_a_key_of_another_service_or_a_revoked_key_is_refused(alice, client, replica_servers):
    replica_servers("r1", 8123)
    job = running_replica(alice, "llm", 8123)
    _, other = ServiceKey.issue(job.team, "embedder", alice)
    key, raw = ServiceKey.issue(job.team, "llm", alice)
    assert client.get("/serve/vision/llm/", HTTP_AUTHORIZATION=f"Bearer {other}").status_code == 401
    assert client.get("/serve/vision/llm/", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 200
    ServiceKey.objects.filter(pk=key.pk).update(revoked_at="2020-01-01T00:00Z")
    assert client.get("/serve/vision/llm/", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 401


def test_a_replica_that_stopped_answering_is_skipped_and_none_running_is_503(alice, client, replica_servers):
    dead = replica_servers("r1", 8124)
    replica_servers("r2", 8125)
    first = running_replica(alice, "llm-1", 8124)
    running_replica(alice, "llm-2", 8125)
    _, raw = ServiceKey.issue(first.team, "llm", alice)
    dead.terminate()
    dead.wait(10)
    bodies = {client.get("/serve/vision/llm/", HTTP_AUTHORIZATION=f"Bearer {raw}").content.decode()
              for _ in range(3)}
    assert bodies == {"r2 /"}
    Job.objects.update(state=JobState.SUCCEEDED)
    assert client.get("/serve/vision/llm/", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 503


def test_members_create_list_and_revoke_keys_through_the_api_and_outsiders_get_404(
    alice, bob, charlie, api, client, replica_servers
):
    replica_servers("r1", 8126)
    running_replica(alice, "llm", 8126)
    url = "/api/v1/services/vision/llm/keys/"
    created = api(alice).post(url)
    assert created.status_code == 201
    raw, key_id = created.json()["key"], created.json()["id"]
    stored = ServiceKey.objects.get(pk=key_id)
    assert stored.key_hash == hash_key(raw) and stored.created_by == alice
    listed = api(bob).get(url).json()
    assert [k["id"] for k in listed] == [key_id] and "key" not in listed[0]
    assert client.get("/serve/vision/llm/", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 200

    assert api(charlie).get(url).status_code == 404
    assert api(charlie).post(url).status_code == 404
    assert api(charlie).delete(f"{url}{key_id}/").status_code == 404
    assert api().post(url).status_code in (401, 403)
    assert api(bob).delete(f"{url}{key_id}/").json()["revoked_at"] is not None
    assert client.get("/serve/vision/llm/", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 401
    assert ServiceKey.objects.count() == 1


def test_requests_and_latency_per_service_are_counted_and_exported_at_metrics(alice, client, replica_servers):
    replica_servers("r1", 8127)
    job = running_replica(alice, "llm", 8127)
    _, raw = ServiceKey.issue(job.team, "llm", alice)
    for _ in range(3):
        assert client.get("/serve/vision/llm/", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 200
    Job.objects.update(state=JobState.SUCCEEDED)
    assert client.get("/serve/vision/llm/", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 503
    client.get("/serve/vision/llm/")  # refused for want of a key: not the service's traffic
    traffic = ServiceTraffic.objects.get(team=job.team, service="llm")
    assert (traffic.requests, traffic.failed) == (4, 1) and 0 < traffic.seconds_total < 30
    alice.is_staff = True
    alice.save()
    client.force_login(alice)
    body = client.get("/metrics").content.decode()
    assert 'rota_service_requests_total{team="vision",service="llm"} 4' in body
    assert 'rota_service_failed_requests_total{team="vision",service="llm"} 1' in body
    assert f'rota_service_request_seconds_total{{team="vision",service="llm"}} {traffic.seconds_total:g}' in body
    assert 'rota_service_request_duration_seconds_bucket{team="vision",service="llm",le="+Inf"} 4' in body
    assert 'rota_service_request_duration_seconds_count{team="vision",service="llm"} 4' in body
    assert 'rota_service_request_duration_seconds_bucket{team="vision",service="llm",le="30"} 4' in body
