"""``rota service`` against a real live server with a real token: show, scale while it runs, autoscale;
another team's service is an error like a missing one."""

import json

from scheduler.models import InferenceService, Job
from scheduler.services.jobs import job_submit
from tests.portal.test_cli import out_of, rota  # noqa: F401  (the live-server CLI fixture)


def test_it_shows_scales_and_autoscales_a_service(rota, alice, charlie, capsys):  # noqa: F811
    job_submit(user=alice, name="llm-1", kind="inference", command="serve", gpu_model="h100-80gb")
    assert rota(alice, "service", "scale", "vision/llm", "3") == 0
    out, _ = out_of(capsys)
    assert out.startswith("vision/llm: 1 -> 3 replicas; started #")
    assert sorted(Job.objects.filter(state="pending").values_list("name", flat=True)) == ["llm-1", "llm-2", "llm-3"]
    assert rota(alice, "service", "scale", "vision/llm", "1") == 0
    assert "cancelled #" in out_of(capsys)[0]
    assert rota(alice, "service", "show", "vision/llm") == 0
    out, _ = out_of(capsys)
    assert "service vision/llm: 1 replicas" in out and "llm-1" in out and "llm-3" not in out
    assert "traffic: 0 requests, 0 failed" in out and "autoscale: off" in out

    assert rota(alice, "service", "autoscale", "vision/llm", "--min", "1", "--max", "4", "--target-rps", "5") == 0
    assert "autoscale 1-4 replicas at 5 requests/s each" in out_of(capsys)[0]
    assert InferenceService.objects.get().max_replicas == 4
    assert rota(alice, "--json", "service", "show", "vision/llm") == 0
    assert json.loads(out_of(capsys)[0])["autoscale"]["enabled"] is True
    assert rota(alice, "service", "autoscale", "vision/llm", "--max", "99") == 1
    assert "max_replicas" in out_of(capsys)[1]
    assert rota(alice, "service", "scale", "llm", "2") == 1
    assert "TEAM/SERVICE" in out_of(capsys)[1]

    assert rota(charlie, "service", "scale", "vision/llm", "3") == 1
    assert rota(charlie, "service", "show", "vision/llm") == 1
    assert Job.objects.filter(state="pending").count() == 1


def test_rota_submit_makes_a_probed_service_of_several_replicas(rota, alice, capsys):  # noqa: F811
    assert rota(alice, "submit", "--kind", "inference", "--name", "llm", "--gpu-model", "h100-80gb", "--replicas",
                "3", "--health-path", "/health", "--env", "MODEL=tiny", "--", "python3", "serve.py") == 0
    assert "Submitted inference service vision/llm: 3 replicas" in out_of(capsys)[0]
    jobs = Job.objects.filter(kind="inference").order_by("name")
    assert [j.name for j in jobs] == ["llm-1", "llm-2", "llm-3"]
    assert all(j.env == {"MODEL": "tiny", "ROTA_HEALTH_PATH": "/health"} for j in jobs)
    assert rota(alice, "submit", "--kind", "training", "--replicas", "2", "--", "train") == 1
    assert "replicas: only an inference service" in out_of(capsys)[1]
    assert rota(alice, "submit", "--kind", "inference", "--health-path", "health", "--", "serve") == 1
    assert "health_path: must start with /" in out_of(capsys)[1]
    assert rota(alice, "submit", "--kind", "inference", "--env", "NOVALUE", "--", "serve") == 1
    assert "env: give KEY=VALUE" in out_of(capsys)[1]
    assert rota(alice, "submit", "--kind", "inference", "--name", "big", "--replicas", "17", "--", "serve") == 1
    assert "replicas" in out_of(capsys)[1]  # over the portal's limit: nothing is left running
    assert not Job.objects.filter(name__startswith="big", state__in=["pending", "admitted", "running"]).exists()
    assert Job.objects.exclude(name__startswith="big").count() == 3
