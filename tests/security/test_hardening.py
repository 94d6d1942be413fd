"""CSRF on session POSTs, login throttling (django-axes), and ``check --deploy`` under production settings."""

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client

from scheduler.models import Job

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]


def csrf_token(client: Client, path: str) -> str:
    client.get(path)
    return client.cookies["csrftoken"].value


@pytest.mark.parametrize("path,data", [
    ("/jobs/new/", {"team": "vision", "name": "x", "command": "true", "kind": "training", "gpus": 1}),
    ("/api/v1/jobs/", {"name": "x", "command": "true", "gpu_model": "h100-80gb"}),
    ("/logout/", {}),
])
def test_a_session_post_without_the_csrf_token_is_refused(client_for, path, data):
    client = client_for("owner", csrf=True)
    before = Job.objects.count()
    assert client.post(path, data).status_code == 403
    assert Job.objects.count() == before


def test_job_actions_need_the_csrf_token_and_work_with_it(world, client_for):
    client = client_for("owner", csrf=True)
    job = world["job"]
    assert client.post(f"/jobs/{job.pk}/hold/").status_code == 403
    assert client.post(f"/api/v1/jobs/{job.pk}/hold/").status_code == 403
    assert Job.objects.get(pk=job.pk).state == "pending"
    token = csrf_token(client, f"/jobs/{job.pk}/")
    assert client.post(f"/jobs/{job.pk}/hold/", HTTP_X_CSRFTOKEN=token).status_code == 302
    assert Job.objects.get(pk=job.pk).state == "held"
    response = client.post(f"/api/v1/jobs/{job.pk}/release/", HTTP_X_CSRFTOKEN=token)
    assert response.status_code == 200 and response.json()["state"] == "pending"


def test_token_auth_needs_no_csrf_token(world):
    from rest_framework.authtoken.models import Token

    token = Token.objects.create(user=world["users"]["owner"])
    client = Client(enforce_csrf_checks=True, HTTP_AUTHORIZATION=f"Token {token.key}")
    assert client.post(f"/api/v1/jobs/{world['job'].pk}/hold/").status_code == 200


def _login(client: Client, username: str, password: str):
    return client.post("/login/", {"username": username, "password": password})


def test_logins_are_locked_out_after_repeated_failures(world, settings):
    user = world["users"]["owner"]
    user.set_password("right-horse-battery")
    user.save()
    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert _login(client, "alice", "wrong").status_code == 200  # the form again, with an error
    assert _login(client, "alice", "right-horse-battery").status_code == 302  # success resets the count
    for _ in range(settings.AXES_FAILURE_LIMIT):
        _login(Client(), "alice", "wrong")
    locked = _login(Client(), "alice", "right-horse-battery")
    assert locked.status_code == 429  # even the right password, until the cool-off
    assert "_auth_user_id" not in Client().session
    other = _login(Client(), "bob", "wrong")  # another account from the same address is not locked
    assert other.status_code == 200


def test_the_api_token_endpoint_is_throttled_too(world, settings):
    user = world["users"]["mate"]
    user.set_password("right-horse-battery")
    user.save()
    for _ in range(settings.AXES_FAILURE_LIMIT):
        assert Client().post("/api/v1/auth/token/", {"username": "bob", "password": "nope"}).status_code == 400
    response = Client().post("/api/v1/auth/token/", {"username": "bob", "password": "right-horse-battery"})
    # locked out: even the right password gets no token (DRF's view answers 400, not axes' 429)
    assert response.status_code in (400, 403, 429) and "token" not in response.json()


def test_a_username_longer_than_any_account_is_a_failed_login_not_a_server_error(world):
    name = "x" * 300
    page = _login(Client(), name, "wrong")
    assert page.status_code == 200 and "Please enter a correct username and password" in page.content.decode()
    empty = _login(Client(), "", "").content.decode()
    assert "Username: This field is required." in empty and "Password: This field is required." in empty
    token = Client().post("/api/v1/auth/token/", {"username": name, "password": "wrong"},
                          content_type="application/json")
    assert token.status_code == 400
    from axes.models import AccessAttempt

    assert AccessAttempt.objects.filter(username="x" * 150).exists()


def test_check_deploy_is_clean_under_production_settings():
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings_production",
           "SECRET_KEY": secrets.token_urlsafe(50), "ALLOWED_HOSTS": "rota.example.com", "DEBUG": "1"}
    done = subprocess.run([sys.executable, "manage.py", "check", "--deploy"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    security = [line for line in output.splitlines() if "(security." in line or "(axes." in line]
    assert security == [], "\n".join(security)


def test_production_settings_refuse_a_missing_or_default_secret_key():
    for key in ("", "dev-only-insecure-secret-key-change-me-in-production-0123456789"):
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings_production", "SECRET_KEY": key}
        done = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode != 0 and "SECRET_KEY" in done.stderr


def test_under_production_settings_every_web_process_counts_quotes_in_one_shared_cache():
    """Two processes (two web workers): what one counted, the other sees."""
    import random

    script = (
        "import sys, django; django.setup()\n"
        "from types import SimpleNamespace\n"
        "from portal.throttle import QuoteThrottle\n"
        "QuoteThrottle.rate = '2/min'\n"
        "person = SimpleNamespace(user=SimpleNamespace(is_authenticated=True, pk=int(sys.argv[1])), META={})\n"
        "print(sum(QuoteThrottle().allow_request(person, None) for _ in range(int(sys.argv[2]))))\n"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings_production",
           "SECRET_KEY": secrets.token_urlsafe(50), "ALLOWED_HOSTS": "rota.example.com"}
    person = str(random.randrange(10**9, 2 * 10**9))  # nobody else's counter

    def allowed(tries: int) -> int:
        done = subprocess.run([sys.executable, "-c", script, person, str(tries)], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return int(done.stdout.strip().splitlines()[-1])

    assert allowed(2) == 2
    assert allowed(1) == 0  # another process, the same person: refused


def test_check_deploy_refuses_production_settings_that_let_the_process_executor_in():
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings_production",
           "SECRET_KEY": secrets.token_urlsafe(50), "ALLOWED_HOSTS": "rota.example.com",
           "ROTA_REQUIRE_ISOLATION": "0"}
    done = subprocess.run([sys.executable, "manage.py", "check", "--deploy"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "(rota.E001) ROTA_REQUIRE_ISOLATION is off" in done.stderr
    plain = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=120)
    assert plain.returncode == 0, plain.stderr  # a deployment check: the demo's own checks stay quiet


def test_check_refuses_a_default_image_that_names_no_registry():
    env = {**os.environ, "ROTA_DEFAULT_IMAGE": "python:3.11"}
    done = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode != 0 and "(rota.E002) ROTA_DEFAULT_IMAGE: 'python:3.11' is not a full image" in done.stderr
