"""The portal over ASGI (portal/asgi.py, as make serve and make dev serve it): Django answers everything but
/notebooks/, and the notebook proxy's answers before any server is involved: a member of the team is told the
notebook is not running, anyone else gets 404, someone signed out is sent to sign in."""

import pytest
import requests
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from scheduler.services.jobs import job_submit
from tests.notebooks import asgi_portal, session_cookie  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db(transaction=True)


def test_django_serves_the_rest_of_the_portal_over_asgi(asgi_portal, alice):  # noqa: F811
    assert "id_username" in requests.get(f"{asgi_portal}/login/", timeout=10).text
    assert requests.get(f"{asgi_portal}/api/v1/jobs/", timeout=10).status_code in (401, 403)
    answer = requests.get(f"{asgi_portal}/api/v1/jobs/", headers={"Cookie": session_cookie(alice)}, timeout=10)
    assert answer.status_code == 200 and answer.json()["count"] == 0
    assert requests.get(f"{asgi_portal}/static/does-not-exist.css", timeout=10).status_code == 404


def test_the_proxy_answers_a_member_an_outsider_and_a_visitor_before_reaching_any_server(
    asgi_portal, alice, charlie  # noqa: F811
):
    job = job_submit(user=alice, name="lab", command="", kind="notebook", gpu_model="h100-80gb")  # pending
    url = f"{asgi_portal}/notebooks/{job.pk}/lab"
    member = requests.get(url, headers={"Cookie": session_cookie(alice)}, timeout=10)
    assert member.status_code == 503 and "not running (pending)" in member.text
    assert member.headers["Content-Type"].startswith("text/html") and f'href="/jobs/{job.pk}/"' in member.text
    assert requests.get(url, headers={"Cookie": session_cookie(charlie)}, timeout=10).status_code == 404
    missing = f"{asgi_portal}/notebooks/{job.pk + 1000}/lab"
    assert requests.get(missing, headers={"Cookie": session_cookie(alice)}, timeout=10).status_code == 404
    assert requests.get(f"{asgi_portal}/notebooks/x/", timeout=10).status_code == 404
    visitor = requests.get(url, allow_redirects=False, timeout=10)
    assert visitor.status_code == 302 and visitor.headers["Location"] == f"/login/?next=%2Fnotebooks%2F{job.pk}%2Flab"
    forged = requests.get(url, headers={"Cookie": "sessionid=forged"}, allow_redirects=False, timeout=10)
    assert forged.status_code == 302
    ws = url.replace("http://", "ws://")
    for cookie, status in ((session_cookie(charlie), 404), (session_cookie(alice), 503), ("", 404)):
        with pytest.raises(InvalidStatus) as refused:
            connect(ws, additional_headers={"Cookie": cookie} if cookie else {}, open_timeout=10)
        assert refused.value.response.status_code == status


def test_a_notebook_that_has_ended_is_410_gone_to_its_team_with_when_and_how_to_start_another(
    asgi_portal, alice, charlie  # noqa: F811
):
    from datetime import UTC, datetime

    from scheduler.models import Job

    job = job_submit(user=alice, name="lab", command="", kind="notebook", gpu_model="h100-80gb")
    Job.objects.filter(pk=job.pk).update(state="succeeded", stop_reason="idle",
                                         finished_at=datetime(2026, 3, 4, 5, 6, tzinfo=UTC))
    url = f"{asgi_portal}/notebooks/{job.pk}/lab"
    member = requests.get(url, headers={"Cookie": session_cookie(alice)}, timeout=10)
    assert member.status_code == 410 and member.headers["Content-Type"].startswith("text/html")
    page = member.text
    assert f"Notebook #{job.pk} (lab) has ended" in page and "2026-03-04 05:06" in page and "idle" in page
    assert f'href="/jobs/new/?copy={job.pk}"' in page and 'href="/jobs/new/?kind=notebook"' in page
    assert "alice" in page  # the portal's own layout, signed in
    assert requests.get(url, headers={"Cookie": session_cookie(charlie)}, timeout=10).status_code == 404
    with pytest.raises(InvalidStatus) as refused:
        connect(url.replace("http://", "ws://"), additional_headers={"Cookie": session_cookie(alice)},
                open_timeout=10)
    assert refused.value.response.status_code == 410 and b"has ended" in refused.value.response.body
