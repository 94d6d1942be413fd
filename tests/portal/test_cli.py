"""The ``rota`` CLI against a real live server with a real token: no mocked HTTP."""

import json
import stat
from decimal import Decimal

import pytest
from rest_framework.authtoken.models import Token

from portal import cli
from scheduler.models import Job, JobLog
from scheduler.models.jobs import JobState


@pytest.fixture
def rota(transactional_db, live_server, monkeypatch, tmp_path):
    """Run ``rota …`` as a given user; returns (exit status, stdout, stderr)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("ROTA_TOKEN", raising=False)
    monkeypatch.setenv("ROTA_URL", live_server.url)

    def run(user, *argv, capsys=None):
        if user is not None:
            token, _ = Token.objects.get_or_create(user=user)
            monkeypatch.setenv("ROTA_TOKEN", token.key)
        return cli.main(list(argv))

    return run


def out_of(capsys):
    captured = capsys.readouterr()
    return captured.out, captured.err


def test_it_logs_in_and_stores_the_token_readable_only_by_the_owner(rota, alice, live_server, monkeypatch,
                                                                   tmp_path, capsys):
    monkeypatch.delenv("ROTA_URL")
    monkeypatch.setenv("ROTA_PASSWORD", "pw-Example-123")
    assert cli.main(["login", "--url", live_server.url, "--username", "alice"]) == 0
    path = tmp_path / "config" / "rota" / "config.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    saved = json.loads(path.read_text())
    assert saved["url"] == live_server.url
    assert saved["token"] == Token.objects.get(user=alice).key
    capsys.readouterr()
    assert cli.main(["queue"]) == 0  # the saved config is used


def test_it_refuses_a_wrong_password(rota, alice, live_server, monkeypatch, capsys):
    monkeypatch.setenv("ROTA_PASSWORD", "wrong")
    assert cli.main(["login", "--url", live_server.url, "--username", "alice"]) == 1
    _, err = out_of(capsys)
    assert err.startswith("error: ")


def test_it_says_how_to_log_in_when_there_is_no_token(rota, capsys):
    assert rota(None, "queue") == 1
    assert "rota login" in out_of(capsys)[1]


def test_it_submits_a_command_after_double_dash(rota, alice, capsys):
    status = rota(alice, "submit", "--name", "resnet", "--gpus", "2", "--gpu-model", "h100-80gb", "--time-limit",
                  "60", "--json", "--", "python", "train.py", "--lr", "0.1")
    out, err = out_of(capsys)
    assert status == 0, err
    body = json.loads(out)
    job = Job.objects.get(pk=body["id"])
    assert job.name == "resnet" and job.gpus == 2 and job.gpu_model.name == "h100-80gb"
    assert job.command == "python train.py --lr 0.1" and job.time_limit_minutes == 60
    assert job.team.name == "vision" and job.submitted_by == alice


def test_it_submits_a_notebook_without_a_command_which_runs_jupyterlab(rota, alice, capsys):
    from scheduler.kinds import NOTEBOOK_COMMAND

    status = rota(alice, "submit", "--kind", "notebook", "--gpu-model", "h100-80gb", "--json")
    out, err = out_of(capsys)
    assert status == 0, err
    assert Job.objects.get(pk=json.loads(out)["id"]).command == NOTEBOOK_COMMAND
    assert rota(alice, "submit", "--gpu-model", "h100-80gb") == 1  # any other kind still needs one
    assert "give a command" in out_of(capsys)[1]


def test_it_submits_a_fraction_of_a_gpu_with_the_memory_it_needs(rota, alice, capsys):
    status = rota(alice, "submit", "--gpu-fraction", "0.25", "--gpu-memory-gb", "10", "--gpu-model", "h100-80gb",
                  "--json", "--", "python", "serve.py")
    out, err = out_of(capsys)
    assert status == 0, err
    job = Job.objects.get(pk=json.loads(out)["id"])
    assert (job.gpu_fraction, job.gpu_memory_gb) == (Decimal("0.25"), 10)


def test_it_submits_a_script_whose_header_gives_the_flags(rota, alice, tmp_path, capsys):
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/bash\n#ROTA --gpus 2 --gpu-model h100-80gb\n#ROTA --priority-class batch --cpus 8\n"
                      "echo hello\n#ROTA --gpus 9\n")
    assert rota(alice, "submit", "--cpus", "4", str(script)) == 0, out_of(capsys)
    out, _ = out_of(capsys)
    job = Job.objects.get()
    assert f"Submitted job {job.pk}" in out
    assert job.name == "train" and job.gpus == 2 and job.gpu_model.name == "h100-80gb"
    assert job.priority_class.name == "batch"
    assert job.cpus == 4  # the command line wins over the header
    assert job.command.startswith("#!/bin/bash") and "echo hello" in job.command


def test_it_reports_a_bad_script_header(rota, alice, tmp_path, capsys):
    script = tmp_path / "bad.sh"
    script.write_text("#ROTA --gpuz 2\necho hi\n")
    assert rota(alice, "submit", str(script)) == 1
    assert "--gpuz" in out_of(capsys)[1]
    assert not Job.objects.exists()


def test_it_prints_api_validation_errors_with_the_field_and_exits_1(rota, alice, capsys):
    status = rota(alice, "submit", "--gpus", "2", "--gpu-model", "tpu-v9", "--", "python", "x.py")
    _, err = out_of(capsys)
    assert status == 1
    assert "error: gpu_model: " in err
    assert not Job.objects.exists()


def test_it_lists_the_queue_with_reasons_and_positions(rota, alice, charlie, capsys):
    rota(alice, "submit", "--name", "mine", "--", "true")
    rota(charlie, "submit", "--name", "theirs", "--", "true")
    Job.objects.filter(name="mine").update(pending_reason_code="Resources", queue_position=3,
                                           pending_reason_message="waiting for 1 GPU")
    capsys.readouterr()
    assert rota(alice, "queue") == 0
    out, _ = out_of(capsys)
    header, *rows = out.strip().splitlines()
    assert header.split() == ["ID", "NAME", "TEAM", "KIND", "STATE", "GPUS", "REASON"]
    assert len(rows) == 1  # charlie's job is another team's
    assert "mine" in rows[0] and "(Resources) #3" in rows[0] and "pending" in rows[0]
    assert rota(alice, "queue", "--json") == 0
    assert [j["name"] for j in json.loads(out_of(capsys)[0])] == ["mine"]


def test_queue_hides_finished_jobs_unless_asked(rota, alice, capsys):
    rota(alice, "submit", "--name", "old", "--", "true")
    Job.objects.update(state=JobState.SUCCEEDED)
    capsys.readouterr()
    rota(alice, "queue", "--json")
    assert json.loads(out_of(capsys)[0]) == []
    rota(alice, "queue", "--all", "--json")
    assert [j["name"] for j in json.loads(out_of(capsys)[0])] == ["old"]
    rota(alice, "queue", "--state", "succeeded", "--json")
    assert len(json.loads(out_of(capsys)[0])) == 1


def test_queue_of_a_team_one_may_not_see_is_an_error_not_an_empty_table(rota, alice, charlie, capsys):
    rota(charlie, "submit", "--name", "nlp-work", "--", "true")
    capsys.readouterr()
    assert rota(alice, "queue", "--team", "nlp") == 1
    out, err = out_of(capsys)
    assert err.strip() == "error: No such team" and "nlp-work" not in out
    assert rota(charlie, "queue", "--team", "nlp") == 0 and "nlp-work" in out_of(capsys)[0]


def test_it_shows_a_job_and_hides_another_teams_job(rota, alice, charlie, capsys):
    rota(alice, "submit", "--name", "detail-me", "--", "echo", "hi")
    job = Job.objects.get()
    capsys.readouterr()
    assert rota(alice, "show", str(job.pk)) == 0
    out, _ = out_of(capsys)
    assert "detail-me" in out and "state:" in out and "echo hi" in out
    assert rota(alice, "show", str(job.pk), "--json") == 0
    assert json.loads(out_of(capsys)[0])["id"] == job.pk
    assert rota(charlie, "show", str(job.pk)) == 1
    assert out_of(capsys)[1].startswith("error: ")
    Job.objects.filter(pk=job.pk).update(restarts=3)  # a service that was restarted after failures
    assert rota(alice, "show", str(job.pk)) == 0
    assert "restarts:           3" in out_of(capsys)[0]


def test_it_submits_in_an_image_and_shows_it_and_why_the_job_failed(rota, alice, capsys):
    assert rota(alice, "submit", "--image", "localhost/rota/torch:2.3", "--", "python3", "-V") == 0
    job = Job.objects.get()
    assert job.image == "localhost/rota/torch:2.3"
    Job.objects.filter(pk=job.pk).update(state="failed", failure_reason="OOMKilled", failure_message="limit 1024 MiB")
    capsys.readouterr()
    assert rota(alice, "show", str(job.pk)) == 0
    out = out_of(capsys)[0]
    assert "image:              localhost/rota/torch:2.3" in out
    assert "failure_reason:     OOMKilled: limit 1024 MiB" in out
    assert rota(alice, "submit", "--image", "quay.io/x/y:1", "--", "true") == 1
    assert "image: quay.io/x/y:1 is not allowed" in out_of(capsys)[1]


def test_it_cancels_holds_and_releases(rota, alice, bob, capsys):
    rota(alice, "submit", "--name", "x", "--", "true")
    job = Job.objects.get()
    assert rota(alice, "hold", str(job.pk)) == 0
    assert "held" in out_of(capsys)[0]
    assert rota(alice, "release", str(job.pk), "--json") == 0
    assert json.loads(out_of(capsys)[0])["state"] == "pending"
    assert rota(bob, "cancel", str(job.pk)) == 1  # a team-mate may see but not act
    assert out_of(capsys)[1].startswith("error: ")
    assert rota(alice, "cancel", str(job.pk)) == 0
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED


def test_it_prints_logs_and_follows_until_the_job_finishes(rota, alice, capsys):
    rota(alice, "submit", "--name", "x", "--", "true")
    job = Job.objects.get()
    JobLog.objects.create(job=job, attempt=job.attempt, content="line 1\n", size=7)
    Job.objects.filter(pk=job.pk).update(state=JobState.SUCCEEDED)
    capsys.readouterr()
    assert rota(alice, "logs", str(job.pk), "-f") == 0
    assert out_of(capsys)[0] == "line 1\n"
    assert rota(alice, "logs", str(job.pk), "--json") == 0
    body = json.loads(out_of(capsys)[0])
    assert body["content"] == "line 1\n" and body["finished"] is True


def test_logs_follow_polls_with_the_offset(rota, alice, capsys, monkeypatch):
    rota(alice, "submit", "--name", "x", "--", "true")
    job = Job.objects.get()
    JobLog.objects.create(job=job, attempt=job.attempt, content="a\n", size=2)
    polls = []

    def grow(_seconds):
        polls.append(1)
        JobLog.objects.filter(job=job).update(content="a\nb\n", size=4)
        Job.objects.filter(pk=job.pk).update(state=JobState.SUCCEEDED)

    monkeypatch.setattr(cli.time, "sleep", grow)
    capsys.readouterr()
    assert rota(alice, "logs", str(job.pk), "--follow") == 0
    assert out_of(capsys)[0] == "a\nb\n"
    assert polls == [1]


def test_it_lists_nodes(rota, alice, capsys):
    from scheduler.models import Gpu

    Gpu.objects.filter(node__name="node-h100", index=0).update(healthy=False, health_reason="XID 79")
    assert rota(alice, "nodes") == 0
    out, _ = out_of(capsys)
    header, *lines = out.splitlines()
    assert header.split()[3] == "GPUS(HEALTHY/TOTAL)"
    h100 = next(line.split() for line in lines if line.startswith("node-h100"))
    assert h100[3] == "3/4" and "h100-80gb" in out
    assert "EXECUTOR" in out and "? (NOT isolated)" in out  # an agent that did not say how it runs jobs
    assert rota(alice, "nodes", "--json") == 0
    assert {n["name"] for n in json.loads(out_of(capsys)[0])} == {"node-h100", "node-a100"}


def test_it_reads_every_page_of_nodes_and_passes_the_filters(rota, alice, cluster, monkeypatch, capsys):
    from scheduler.models import Node

    monkeypatch.setattr(cli, "NODE_PAGE", 1)  # one node a page: the listing must follow "next"
    assert rota(alice, "nodes", "--json") == 0
    assert [n["name"] for n in json.loads(out_of(capsys)[0])] == ["node-a100", "node-h100"]
    Node.objects.filter(name="node-a100").update(state=Node.DRAINING)
    assert rota(alice, "nodes", "--state", "draining", "--pool", "train", "--json") == 0
    assert [n["name"] for n in json.loads(out_of(capsys)[0])] == ["node-a100"]
    assert rota(alice, "nodes", "--state", "asleep") == 1
    assert "state" in out_of(capsys)[1]


def test_parse_script_reads_only_the_header():
    flags, text = cli.parse_script("#!/bin/sh\n# comment\n#ROTA --gpus 2 # two\nrun\n#ROTA --gpus 3\n")
    assert flags == ["--gpus", "2"]
    assert text.endswith("#ROTA --gpus 3\n")


def test_it_shows_fair_share_and_quota_like_sshare(rota, alice, charlie, capsys):
    assert rota(alice, "share") == 0
    out, _ = out_of(capsys)
    lines = out.splitlines()
    assert lines[0].split() == ["TEAM", "ENTITLEMENT", "NORMSHARES", "RAWUSAGE", "NORMUSAGE", "FAIRSHARE", "RANK"]
    assert lines[1].split()[0] == "vision" and lines[1].split()[5] == "1.000"
    assert "nlp" not in out  # only teams alice may see
    assert any(line.split()[:2] == ["vision", "h100-80gb"] for line in lines)
    assert rota(alice, "share", "vision", "--json") == 0
    body = json.loads(out_of(capsys)[0])
    assert body[0]["share"]["team"] == "vision" and body[0]["share"]["entitlement"] == 3.0
    assert rota(charlie, "share", "vision") == 1
    assert "error:" in out_of(capsys)[1]


def test_it_lists_templates_and_submits_from_one_with_flags_winning(rota, alice, cluster, capsys):
    from scheduler.models import JobTemplate

    JobTemplate.objects.create(team=cluster["vision"], name="ib-train", kind="training", fields={
        "name": "resnet", "command": "python train.py", "gpus": 2, "gpu_model": "h100-80gb",
        "node_labels": "network=ib", "preemptible": "no", "time_limit_minutes": 90})
    assert rota(alice, "templates") == 0
    out, _ = out_of(capsys)
    assert "ib-train" in out and "python train.py" in out
    assert rota(alice, "submit", "--template", "ib-train", "--gpus", "1") == 0
    job = Job.objects.get()
    assert (job.name, job.command, job.gpus, job.time_limit_minutes, job.preemptible) == (
        "resnet", "python train.py", 1, 90, False)
    assert job.node_labels == {"network": "ib"} and job.team.name == "vision"
    capsys.readouterr()
    assert rota(alice, "submit", "--template", "missing") == 1
    assert "no template named 'missing'" in out_of(capsys)[1]


def test_a_template_without_a_name_names_its_jobs_after_itself(rota, alice, cluster, capsys):
    from scheduler.models import JobTemplate

    JobTemplate.objects.create(team=cluster["vision"], name="quick", kind="evaluation",
                               fields={"command": "python eval.py", "gpus": 1})
    assert rota(alice, "submit", "--template", "quick") == 0
    assert Job.objects.get().name == "quick"


def test_queue_lists_every_waiting_job_however_many_finished_since(rota, alice, capsys):
    rota(alice, "submit", "--name", "waits", "--", "true")
    first = Job.objects.get()
    fields = {f.attname: getattr(first, f.attname) for f in Job._meta.concrete_fields if f.name != "id"}
    Job.objects.bulk_create([Job(**{**fields, "name": f"done-{i}", "state": JobState.SUCCEEDED})
                             for i in range(cli.PAGE + 5)])
    capsys.readouterr()
    assert rota(alice, "queue", "--json") == 0
    assert [j["name"] for j in json.loads(out_of(capsys)[0])] == ["waits"]
    assert rota(alice, "queue", "--all", "--limit", "3", "--json") == 0
    out, err = out_of(capsys)
    assert len(json.loads(out)) == 3 and f"showing the newest 3 of {cli.PAGE + 6} jobs" in err


def test_json_given_before_the_subcommand_counts(rota, alice, capsys):
    rota(alice, "submit", "--name", "x", "--", "true")
    capsys.readouterr()
    assert rota(alice, "--json", "queue") == 0
    assert [j["name"] for j in json.loads(out_of(capsys)[0])] == ["x"]


def test_cancel_says_what_happened(rota, alice, capsys):
    rota(alice, "submit", "--name", "x", "--", "true")
    job = Job.objects.get()
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING)
    capsys.readouterr()
    assert rota(alice, "cancel", str(job.pk)) == 0
    assert "cancel requested (running" in out_of(capsys)[0]
    Job.objects.filter(pk=job.pk).update(state=JobState.SUCCEEDED)
    assert rota(alice, "cancel", str(job.pk)) == 0
    assert "already succeeded; nothing to cancel" in out_of(capsys)[0]


@pytest.mark.parametrize("url_suffix", ["/login/?next=", "/nowhere"])
def test_a_url_that_is_not_the_portal_is_named_without_a_traceback(rota, alice, live_server, monkeypatch, capsys,
                                                                   url_suffix):
    monkeypatch.setenv("ROTA_URL", live_server.url + url_suffix)
    assert rota(alice, "queue") == 1
    err = out_of(capsys)[1]
    assert err.startswith("error: ") and ("did not answer like a Rota portal" in err or "portal's address" in err)


def test_unreachable_and_malformed_urls_get_one_short_line(rota, alice, monkeypatch, capsys):
    monkeypatch.setenv("ROTA_URL", "http://127.0.0.1:9")
    assert rota(alice, "queue") == 1
    err = out_of(capsys)[1].strip()
    assert err == "error: cannot reach http://127.0.0.1:9: connection refused (is the portal running?)"
    monkeypatch.setenv("ROTA_URL", "127.0.0.1:8400")
    assert rota(alice, "queue") == 1
    assert "write it as http(s)://host[:port]" in out_of(capsys)[1]


def test_bad_local_input_is_an_error_line_not_a_traceback(rota, alice, tmp_path, monkeypatch, capsys):
    import io

    script = tmp_path / "train.sh"
    script.write_text('#!/bin/sh\n#ROTA --gpus 1 --gpu-model "h100-80gb\npython train.py\n')
    assert rota(alice, "submit", str(script)) == 1
    assert "no closing quotation" in out_of(capsys)[1]
    script.write_text("#ROTA --gpus 1\npython train.py\n")
    assert rota(alice, "submit", str(script), "arg1") == 1
    assert "are not passed to it" in out_of(capsys)[1]
    assert rota(alice, "submit", str(script), "--", "arg1") == 1
    assert "is a script" in out_of(capsys)[1]
    with pytest.raises(SystemExit) as exc:
        rota(alice, "submit", "--gpu-fraction", "nan", "--", "true")
    assert exc.value.code == 2 and "must be a finite number" in out_of(capsys)[1]
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert cli.main(["login", "--url", "http://127.0.0.1:9"]) == 1
    assert "standard input is closed" in out_of(capsys)[1]
    config = tmp_path / "config" / "rota" / "config.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("[1, 2]")
    monkeypatch.delenv("ROTA_TOKEN")
    assert cli.main(["queue"]) == 1
    assert "expected a JSON object" in out_of(capsys)[1]
    assert Job.objects.count() == 0
