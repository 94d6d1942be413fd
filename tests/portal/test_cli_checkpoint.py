"""``rota checkpoint`` against a real live server with a real token."""

import pytest
from rest_framework.authtoken.models import Token

from portal import cli
from scheduler.cycle import run_cycle
from scheduler.models import Job
from scheduler.services.jobs import job_submit


@pytest.fixture
def rota(transactional_db, live_server, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("ROTA_URL", live_server.url)
    monkeypatch.delenv("ROTA_JOB_ID", raising=False)

    def run(user, *argv):
        monkeypatch.setenv("ROTA_TOKEN", Token.objects.get_or_create(user=user)[0].key)
        return cli.main(list(argv))

    return run


@pytest.fixture
def job(alice, node_client):
    job = job_submit(user=alice, name="train", command="train", gpu_model="h100-80gb")
    run_cycle()
    node_client().post(f"/api/v1/node/jobs/{job.pk}/events/", {"attempt": 1, "type": "started"}, format="json")
    job.refresh_from_db()
    assert job.state == "running" and job.last_checkpoint_at is None
    return job


def test_it_reports_a_checkpoint_of_the_job_it_runs_in(rota, alice, job, monkeypatch, capsys):
    monkeypatch.setenv("ROTA_JOB_ID", str(job.pk))  # as inside the job
    assert rota(alice, "checkpoint") == 0
    job.refresh_from_db()
    assert job.last_checkpoint_at is not None
    assert f"job {job.pk}: checkpoint recorded at" in capsys.readouterr().out


def test_it_reports_a_checkpoint_of_a_named_job(rota, bob, job, capsys):
    assert rota(bob, "--json", "checkpoint", str(job.pk)) == 0
    assert '"attempt": 1' in capsys.readouterr().out
    assert Job.objects.get(pk=job.pk).last_checkpoint_at is not None
    assert rota(bob, "show", str(job.pk)) == 0
    assert "last_checkpoint_at:" in capsys.readouterr().out


def test_another_team_cannot_checkpoint_the_job(rota, charlie, job, capsys):
    assert rota(charlie, "checkpoint", str(job.pk)) == 1
    assert "No such job" in capsys.readouterr().err  # the same answer as for a missing job
    assert Job.objects.get(pk=job.pk).last_checkpoint_at is None


def test_it_says_which_job_it_needs(rota, alice, capsys):
    assert rota(alice, "checkpoint") == 1
    assert "ROTA_JOB_ID" in capsys.readouterr().err
    assert rota(alice, "checkpoint", "x1") == 1
    assert "JOB must be a job number" in capsys.readouterr().err
