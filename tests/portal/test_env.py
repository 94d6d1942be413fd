"""Settings from the environment: safe defaults, and a bad value stops the start naming the variable."""

import os
import subprocess
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured

from portal.env import env_bool, env_int, env_list, env_url


def test_it_reads_booleans_integers_and_lists(monkeypatch):
    monkeypatch.setenv("X_FLAG", "Yes")
    monkeypatch.setenv("X_NUM", "42")
    monkeypatch.setenv("X_LIST", "a, b,,c")
    assert env_bool("X_FLAG", False) is True
    assert env_int("X_NUM", 1, minimum=1, maximum=100) == 42
    assert env_list("X_LIST", []) == ["a", "b", "c"]
    assert env_bool("X_UNSET", True) is True


@pytest.mark.parametrize(("name", "value", "reader"), [
    ("X_FLAG", "maybe", lambda: env_bool("X_FLAG", False)),
    ("X_NUM", "many", lambda: env_int("X_NUM", 1)),
    ("X_NUM", "0", lambda: env_int("X_NUM", 1, minimum=1)),
])
def test_a_bad_value_names_the_variable(monkeypatch, name, value, reader):
    monkeypatch.setenv(name, value)
    with pytest.raises(ImproperlyConfigured, match=name):
        reader()


def test_a_server_root_is_read_without_its_trailing_slash(monkeypatch):
    monkeypatch.setenv("X_URL", " https://control.example.com:8002/ ")
    assert env_url("X_URL") == "https://control.example.com:8002"
    monkeypatch.setenv("X_URL", "")
    assert env_url("X_URL") == ""
    assert env_url("X_UNSET") == ""


@pytest.mark.parametrize("value", ["control:8002", "ftp://control", "http://", "http://control/api/v1",
                                   "http://control?x=1", "http://control:port", "http://control:99999",
                                   "http://node:secret@control:8002", "https://@control"])
def test_a_url_that_is_not_a_server_root_names_the_variable(monkeypatch, value):
    monkeypatch.setenv("X_URL", value)
    with pytest.raises(ImproperlyConfigured, match="X_URL must be an http:// or https:// server root"):
        env_url("X_URL")


def test_a_url_with_a_user_is_refused_without_echoing_its_password(monkeypatch):
    monkeypatch.setenv("X_URL", "http://node:s3cret@control:8002")
    with pytest.raises(ImproperlyConfigured, match="with no user or path") as refused:
        env_url("X_URL")
    assert "s3cret" not in str(refused.value)


def _start_with(**env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings", **env},
        capture_output=True, text=True, check=False,
    )


@pytest.mark.parametrize(("env", "named"), [
    ({"DEBUG": "sometimes"}, "DEBUG"),
    ({"DATABASE_URL": "notadb://x"}, "DATABASE_URL"),
    ({"REDIS_URL": "http://localhost:6379"}, "REDIS_URL"),
    ({"DEBUG": "0", "SECRET_KEY": ""}, "SECRET_KEY"),
    ({"ROTA_CYCLE_INTERVAL_S": "0"}, "ROTA_CYCLE_INTERVAL_S"),
    ({"ROTA_NODE_HEARTBEAT_URL": "control:8002"}, "ROTA_NODE_HEARTBEAT_URL"),
])
def test_the_portal_refuses_to_start_with_a_bad_setting(env, named):
    result = _start_with(**env)
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr and named in result.stderr


def test_the_sqlite_fallback_waits_for_locks_instead_of_failing():
    result = subprocess.run(
        [sys.executable, "-c", "from django.conf import settings; import django; django.setup(); "
                               "print(settings.DATABASES['default']['OPTIONS']['transaction_mode'])"],
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings",
             "DATABASE_URL": "sqlite:////tmp/rota-test-fallback.sqlite3"},
        capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "IMMEDIATE"
