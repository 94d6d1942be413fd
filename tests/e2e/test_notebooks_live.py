"""A real JupyterLab as a notebook job, reached through the portal's proxy: API -> cycle -> a node agent on the
container executor -> JupyterLab (localhost/rota/notebook:1) started with its own token on ROTA_PORT under
/notebooks/<id>/ -> the portal served over ASGI. A member runs code in a kernel over the proxied websocket
without ever holding the token; a member of another team gets 404 (HTTP and websocket); someone signed out is
sent to the login page; the server's own last activity is probed for idle reclaim."""

import json
import uuid

import pytest
import requests
from rest_framework.test import APIClient
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from scheduler import notebooks
from scheduler.models import NotebookServer
from scheduler.notebooks import notebooks_probe
from tests.notebooks import asgi_portal, notebook_image, notebook_node, session_cookie, wait_running_notebook  # noqa: F401
from tests.processes import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def submit_notebook(user) -> int:
    api = APIClient()
    api.force_authenticate(user)
    response = api.post("/api/v1/jobs/", {"name": "lab", "kind": "notebook", "gpu_model": "h100-80gb"},
                        format="json")
    assert response.status_code == 201, response.json()
    return response.json()["id"]


def run_code(ws_url: str, cookie: str, origin: str, code: str) -> str:
    """Execute ``code`` in a kernel over its channels websocket (Jupyter's messaging protocol); its stdout."""
    msg_id = uuid.uuid4().hex
    request = {"header": {"msg_id": msg_id, "username": "test", "session": uuid.uuid4().hex, "msg_type":
                          "execute_request", "version": "5.3", "date": ""},
               "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
               "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {},
                           "allow_stdin": False, "stop_on_error": True}}
    out = ""
    with connect(ws_url, additional_headers={"Cookie": cookie}, origin=origin, open_timeout=90) as ws:
        ws.send(json.dumps(request))
        while True:
            message = json.loads(ws.recv(timeout=60))
            if message.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if message["msg_type"] == "stream":
                out += message["content"]["text"]
            if message["msg_type"] == "status" and message["content"]["execution_state"] == "idle":
                return out


def test_a_member_runs_code_in_a_real_jupyterlab_through_the_proxy_and_others_get_404(
    alice, bob, charlie, staff, notebook_node, asgi_portal  # noqa: F811
):
    job_id = submit_notebook(alice)
    job = wait_running_notebook(job_id)
    base = f"{asgi_portal}/notebooks/{job_id}/"
    ws_base = base.replace("http://", "ws://")
    alice_cookie = session_cookie(alice)

    def status():
        answer = requests.get(f"{base}api/status", headers={"Cookie": alice_cookie}, timeout=10)
        return answer.json() if answer.status_code == 200 else None

    assert "last_activity" in wait_for(status, timeout=90, interval=0.5, what="JupyterLab to answer")
    lab = requests.get(f"{base}lab", headers={"Cookie": session_cookie(bob)}, timeout=30)
    assert lab.status_code == 200 and "JupyterLab" in lab.text  # a team-mate too

    # A kernel, started and used over the proxy: HTTP POST, then the channels websocket.
    kernel = requests.post(f"{base}api/kernels", json={"name": "python3"}, timeout=30,
                           headers={"Cookie": alice_cookie, "Origin": asgi_portal})
    assert kernel.status_code == 201, kernel.text
    channels = f"{ws_base}api/kernels/{kernel.json()['id']}/channels"
    assert run_code(channels, alice_cookie, asgi_portal, "print(6*7)") == "42\n"

    # Another team's member, a platform admin who is no member, and a signed-out visitor.
    for outsider in (charlie, staff):
        cookie = session_cookie(outsider)
        assert requests.get(f"{base}api/status", headers={"Cookie": cookie}, timeout=10).status_code == 404
        assert requests.get(f"{base}lab", headers={"Cookie": cookie}, timeout=10).status_code == 404
        with pytest.raises(InvalidStatus) as refused:
            connect(channels, additional_headers={"Cookie": cookie}, origin=asgi_portal, open_timeout=10)
        assert refused.value.response.status_code == 404
    anonymous = requests.get(f"{base}lab", allow_redirects=False, timeout=10)
    assert anonymous.status_code == 302 and anonymous.headers["Location"].startswith("/login/?next=")
    with pytest.raises(InvalidStatus) as refused:
        connect(channels, origin=asgi_portal, open_timeout=10)
    assert refused.value.response.status_code == 404
    # A page of another site may not drive the notebook with alice's session.
    with pytest.raises(InvalidStatus) as refused:
        connect(channels, additional_headers={"Cookie": alice_cookie}, origin="http://evil.example", open_timeout=10)
    assert refused.value.response.status_code == 403
    assert requests.post(f"{base}api/kernels", json={}, timeout=10,
                         headers={"Cookie": alice_cookie, "Origin": "http://evil.example"}).status_code == 403

    # The token is the server's alone: not in the job's API answer or page, and the server refuses without it.
    token = notebooks.token_decrypt(NotebookServer.objects.get(job_id=job_id))
    api = APIClient()
    api.force_authenticate(alice)
    detail = api.get(f"/api/v1/jobs/{job_id}/")
    assert detail.json()["notebook_url"] == detail.json()["connect_url"] == f"/notebooks/{job_id}/"
    assert token not in detail.content.decode() and token not in job.command and token not in lab.text
    direct = f"http://{job.service_address}/notebooks/{job_id}/api/status"
    assert requests.get(direct, timeout=10).status_code == 403
    assert requests.get(direct, headers={"Authorization": f"token {token}"}, timeout=10).status_code == 200

    # Idle reclaim reads the server's own last activity, probed with the token.
    assert notebooks_probe() == 1
    server = NotebookServer.objects.get(job_id=job_id)
    assert server.probed_at is not None and server.probe_error == ""
    assert server.last_activity.isoformat().replace("+00:00", "Z")[:19] == status()["last_activity"][:19]
