"""The jobs API: submit, validation with named fields, tenancy (the outsider gets 404), actions, logs."""

import pytest

from scheduler.models import Job
from tests.assets import external_assets

pytestmark = pytest.mark.django_db

VALID = {"name": "resnet", "command": "python train.py", "gpus": 1, "gpu_model": "h100-80gb"}


def submit(client, **overrides):
    return client.post("/api/v1/jobs/", {**VALID, **overrides}, format="json")


def test_it_submits_a_job_as_pending_for_the_members_only_team(api, alice):
    response = submit(api(alice))
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["team"] == "vision" and body["state"] == "pending" and body["kind"] == "training"
    assert body["priority_class"] == "training" and body["preemptible"] is True
    job = Job.objects.get(pk=body["id"])
    assert list(job.transitions.values_list("to_state", flat=True)) == ["pending"]


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"gpus": 0}, "gpus"),
        ({"gpus": -3}, "gpus"),
        ({"gpus": 100000}, "gpus"),
        ({"gpu_model": "tpu-v9"}, "gpu_model"),
        ({"command": ""}, "command"),
        ({"command": "   "}, "command"),
        ({"name": "x" * 101}, "name"),
        ({"name": "report\u202etxt.exe"}, "name"),  # reads "reportexe.txt": a right-to-left override
        ({"name": "a\u200bb"}, "name"),  # a zero-width space
        ({"team": "nlp"}, "team"),
        ({"team": "no-such-team"}, "team"),
        ({"kind": "mining"}, "kind"),
        ({"gpu_fraction": "1.5"}, "gpu_fraction"),
        ({"gpu_fraction": "0.5", "gpus": 2}, "gpu_fraction"),
        ({"time_limit_minutes": 0}, "time_limit_minutes"),
        ({"priority_class": "vip"}, "priority_class"),
        ({"nodes": 3, "gpus": 4}, "nodes"),
        # A process environment cannot hold these names: the node agent could never start the job.
        ({"env": {"A=B": "x"}}, "env"),
        ({"env": {"": "x"}}, "env"),
        ({"env": {"A\u0000": "x"}}, "env"),
        ({"env": {"1ABC": "x"}}, "env"),
        ({"env": {"K" * 256: "x"}}, "env"),
        ({"env": {f"V{i}": "x" for i in range(101)}}, "env"),
        ({"node_labels": {"a\u0000": "b"}}, "node_labels"),
        ({"node_labels": {"zone": ""}}, "node_labels"),
        ({"idle_timeout_minutes": 1}, "idle_timeout_minutes"),
        ({"gpu": 4}, "gpu"),  # a typo is an error, not a silent 1-GPU job
    ],
)
def test_it_rejects_bad_input_naming_the_field_and_saves_nothing(api, alice, overrides, field):
    response = submit(api(alice), **overrides)
    assert response.status_code == 400, response.json()
    body = response.json()
    assert field in body["errors"], body
    assert field in body["detail"]
    assert Job.objects.count() == 0


def test_it_rejects_a_body_that_is_not_json(api, alice):
    response = api(alice).post("/api/v1/jobs/", "{not json", content_type="application/json")
    assert response.status_code == 400
    assert "JSON" in response.json()["detail"]
    assert Job.objects.count() == 0


def test_it_requires_authentication(api, cluster):
    assert api().get("/api/v1/jobs/").status_code in (401, 403)
    assert submit(api()).status_code in (401, 403)


def test_an_outsider_gets_404_for_another_teams_job_and_never_sees_it_listed(api, alice, charlie):
    job_id = submit(api(alice)).json()["id"]
    outsider = api(charlie)
    assert outsider.get(f"/api/v1/jobs/{job_id}/").status_code == 404
    assert outsider.get(f"/api/v1/jobs/{job_id}/logs/").status_code == 404
    assert outsider.post(f"/api/v1/jobs/{job_id}/cancel/").status_code == 404
    assert outsider.get("/api/v1/jobs/").json()["results"] == []
    assert outsider.get("/api/v1/jobs/999999/").status_code == 404
    assert Job.objects.get(pk=job_id).state == "pending"


def test_a_team_mate_sees_the_job_but_may_not_cancel_it(api, alice, bob):
    job_id = submit(api(alice)).json()["id"]
    mate = api(bob)
    assert mate.get(f"/api/v1/jobs/{job_id}/").status_code == 200
    assert [j["id"] for j in mate.get("/api/v1/jobs/").json()["results"]] == [job_id]
    assert mate.post(f"/api/v1/jobs/{job_id}/cancel/").status_code == 403
    assert Job.objects.get(pk=job_id).state == "pending"


def test_cancelling_a_pending_job_ends_it_at_once(api, alice):
    client = api(alice)
    job_id = submit(client).json()["id"]
    response = client.post(f"/api/v1/jobs/{job_id}/cancel/")
    assert response.status_code == 200
    assert response.json()["state"] == "cancelled"
    assert response.json()["finished_at"] is not None


def test_hold_and_release_move_a_pending_job_out_of_and_back_into_the_queue(api, alice):
    from django.utils import timezone

    client = api(alice)
    job_id = submit(client).json()["id"]
    Job.objects.filter(pk=job_id).update(queue_position=3, estimated_start=timezone.now())  # as the cycle left it
    held = client.post(f"/api/v1/jobs/{job_id}/hold/").json()
    assert held["state"] == "held" and held["queue_position"] is None and held["estimated_start"] is None
    assert client.post(f"/api/v1/jobs/{job_id}/hold/").status_code == 400
    assert client.post(f"/api/v1/jobs/{job_id}/release/").json()["state"] == "pending"


def test_a_name_may_hold_any_script_and_emoji(api, alice):
    for name in ("名前🚀", "👩\u200d💻 run", "تجربة", "ʇxǝʇ"):
        assert submit(api(alice), name=name).status_code == 201, name


def test_the_job_list_filters_by_state(api, alice):
    client = api(alice)
    first = submit(client).json()["id"]
    second = submit(client, name="other").json()["id"]
    client.post(f"/api/v1/jobs/{first}/cancel/")
    assert [j["id"] for j in client.get("/api/v1/jobs/?state=pending").json()["results"]] == [second]


def test_a_token_from_the_token_endpoint_authenticates(api, alice):
    response = api().post("/api/v1/auth/token/", {"username": "alice", "password": "pw-Example-123"}, format="json")
    token = response.json()["token"]
    client = api()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.get("/api/v1/jobs/").status_code == 200


def test_the_openapi_schema_and_docs_are_served(api, alice):
    client = api(alice)
    schema = client.get("/api/schema/")
    assert schema.status_code == 200
    assert b"/api/v1/jobs/" in schema.content
    docs = client.get("/api/docs/")
    assert docs.status_code == 200
    assert external_assets(docs.content.decode()) == []


def test_the_openapi_schema_generates_without_warnings_or_errors():
    """Every endpoint documented, node auth included: a schema client generators can trust."""
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "manage.py", "spectacular", "--validate", "--fail-on-warn",
                             "--file", "/dev/null"], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.parametrize("fraction", ["1.5", "1", "0", "-0.1", "0.3333", "abc"])
def test_every_bad_gpu_fraction_is_told_the_same_rule(api, alice, fraction):
    """Not "≤ 1" when 1 is refused too, nor "no more than 4 digits" for 0.3333: the rule itself."""
    body = submit(api(alice), gpu_fraction=fraction).json()
    assert body["errors"]["gpu_fraction"][0].startswith(
        "must be greater than 0 and less than 1, with at most 3 decimals (e.g. 0.25)")


def test_unknown_fields_and_kinds_are_named_with_what_is_allowed(api, alice):
    body = submit(api(alice), gpu=4, foo="bar").json()
    assert set(body["errors"]) == {"gpu", "foo"} and "allowed: name, team, kind" in body["errors"]["gpu"][0]
    body = submit(api(alice), kind="mining").json()
    assert "allowed: training, inference" in body["errors"]["kind"][0]
    # Every mistake at once: an unknown field does not hide a bad value of a known one (nor the reverse).
    body = submit(api(alice), gpu=4, gpus=0).json()
    assert set(body["errors"]) == {"gpu", "gpus"} and "greater than or equal to 1" in body["errors"]["gpus"][0]
    quote = api(alice).post("/api/v1/jobs/quote/", {**VALID, "gpu": 4}, format="json")
    assert quote.status_code == 400 and "gpu" in quote.json()["errors"]


def test_a_valid_environment_and_idle_timeout_are_kept(api, alice):
    response = submit(api(alice), kind="notebook", env={"HF_HOME": "/data/hf", "_EMPTY": ""},
                      idle_timeout_minutes=30)
    assert response.status_code == 201, response.json()
    job = Job.objects.get(pk=response.json()["id"])
    assert job.env == {"HF_HOME": "/data/hf", "_EMPTY": ""} and job.idle_timeout_minutes == 30


def test_logs_refuse_an_attempt_the_job_never_had(api, alice):
    client = api(alice)
    job_id = submit(client).json()["id"]
    assert client.get(f"/api/v1/jobs/{job_id}/logs/?attempt=1").status_code == 200
    for attempt in (0, -1, 2):
        response = client.get(f"/api/v1/jobs/{job_id}/logs/?attempt={attempt}")
        assert response.status_code == 400 and "between 1 and 1" in str(response.json()["errors"]["attempt"])


def test_a_cancelled_job_keeps_no_waiting_reason(api, alice):
    client = api(alice)
    job_id = submit(client, gpus=13).json()["id"]
    Job.objects.filter(pk=job_id).update(pending_reason_code="QuotaExceeded", pending_reason_message="over",
                                         pending_reason_details={"limit": 12}, queue_position=1)
    body = client.post(f"/api/v1/jobs/{job_id}/cancel/").json()
    assert body["state"] == "cancelled" and body["pending_reason"] is None and body["queue_position"] is None
    assert Job.objects.get(pk=job_id).pending_reason_details == {}


def test_the_job_list_filters_by_state_group_and_refuses_an_unknown_state(api, alice):
    client = api(alice)
    waiting, done = submit(client).json()["id"], submit(client).json()["id"]
    Job.objects.filter(pk=done).update(state="succeeded")
    assert [j["id"] for j in client.get("/api/v1/jobs/?state=active").json()["results"]] == [waiting]
    assert [j["id"] for j in client.get("/api/v1/jobs/?state=finished").json()["results"]] == [done]
    response = client.get("/api/v1/jobs/?state=bogus")
    assert response.status_code == 400
    assert "active, waiting, holding, finished or one of pending" in str(response.json()["errors"])


def test_the_job_list_filters_by_kind_and_team_and_names_a_bad_one(api, alice, charlie, staff):
    client = api(alice)
    training = submit(client).json()["id"]
    notebook = submit(client, kind="notebook").json()["id"]
    assert [j["id"] for j in client.get("/api/v1/jobs/?kind=notebook").json()["results"]] == [notebook]
    assert [j["id"] for j in client.get("/api/v1/jobs/?team=vision").json()["results"]] == [notebook, training]
    response = client.get("/api/v1/jobs/?kind=mining")
    assert response.status_code == 400 and response.json()["errors"]["kind"][0].startswith("must be one of training")
    # Another team's name gets the answer a missing team gets: no team names leak.
    for name in ("nlp", "no-such-team"):
        response = client.get(f"/api/v1/jobs/?team={name}")
        assert response.status_code == 400
        assert response.json()["errors"]["team"] == [f"no team of yours is named '{name}'"]
    assert api(charlie).get("/api/v1/jobs/?team=nlp").json()["results"] == []
    every = client.get("/api/v1/jobs/?state=x&kind=mining&team=nlp")  # every bad filter named at once
    assert every.status_code == 400 and set(every.json()["errors"]) == {"state", "kind", "team"}
    assert len(api(staff).get("/api/v1/jobs/?team=vision").json()["results"]) == 2  # admins: any team


def test_a_page_of_the_job_list_holds_at_most_max_limit_jobs(api, alice, monkeypatch):
    from portal.api import Pagination

    monkeypatch.setattr(Pagination, "max_limit", 3)
    for i in range(5):
        submit(api(alice), name=f"j{i}")
    body = api(alice).get("/api/v1/jobs/", {"limit": 100000}).json()
    assert body["count"] == 5 and len(body["results"]) == 3 and "offset=3" in body["next"]


def test_the_job_list_pages_through_the_callers_jobs_newest_first_each_once(api, alice, charlie, staff):
    """Each page reads its own rows (scheduler.selectors.JobPage): walked page by page with a filter, the
    pages hold every job the caller may see exactly once, newest first, and no other team's."""
    from scheduler.cycle import run_cycle

    mine = [submit(api(alice), name=f"v{i}").json()["id"] for i in range(7)]
    theirs = [submit(api(charlie), name=f"n{i}").json()["id"] for i in range(3)]
    mine.append(submit(api(alice), name="v-last").json()["id"])
    run_cycle()  # some run, with their allocations on the page
    Job.objects.filter(pk=mine[2]).update(state="cancelled")

    def walk(client, query=""):
        ids, url = [], f"/api/v1/jobs/?limit=3{query}"
        while url:
            body = client.get(url).json()
            ids += [row["id"] for row in body["results"]]
            url = body["next"]
        return body["count"], ids

    assert walk(api(alice)) == (8, sorted(mine, reverse=True))
    assert walk(api(alice), "&state=active") == (7, sorted(set(mine) - {mine[2]}, reverse=True))
    assert walk(api(charlie)) == (3, sorted(theirs, reverse=True))
    assert walk(api(staff), "&team=nlp") == (3, sorted(theirs, reverse=True))
    assert api(alice).get("/api/v1/jobs/?limit=3&offset=99").json()["results"] == []
