"""deploy/gunicorn.conf.py's worker warm-up: what each web worker sets before its first request."""

import gc
import os
import runpy
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.urls import get_resolver

CONF = Path(__file__).resolve().parents[2] / "deploy" / "gunicorn.conf.py"


@pytest.fixture(autouse=True)
def _app_name(monkeypatch):
    monkeypatch.setenv("PGAPPNAME", "pytest")  # the file sets it when absent: taken back after each test


@pytest.fixture
def restored():
    """The interpreter's own settings, given back after the warm-up changed them."""
    interval, threshold = sys.getswitchinterval(), gc.get_threshold()
    yield
    sys.setswitchinterval(interval)
    gc.set_threshold(*threshold)
    gc.unfreeze()


def test_a_worker_hands_the_interpreter_lock_over_as_often_as_set(monkeypatch, restored):
    get_resolver().url_patterns  # noqa: B018 - imported already: the warm-up's own import costs nothing here
    monkeypatch.setenv("ROTA_WEB_SWITCH_INTERVAL_US", "2500")
    runpy.run_path(str(CONF))["post_worker_init"](None)
    assert sys.getswitchinterval() == pytest.approx(0.0025)
    assert gc.get_threshold()[0] == 20_000

    monkeypatch.delenv("ROTA_WEB_SWITCH_INTERVAL_US")
    runpy.run_path(str(CONF))["post_worker_init"](None)
    assert sys.getswitchinterval() == pytest.approx(0.001)  # the default: 1 ms, not Python's 5


@pytest.mark.parametrize("value", ["50", "100001", "fast"])
def test_a_switch_interval_out_of_bounds_stops_the_start_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv("ROTA_WEB_SWITCH_INTERVAL_US", value)
    with pytest.raises(ImproperlyConfigured, match="ROTA_WEB_SWITCH_INTERVAL_US"):
        runpy.run_path(str(CONF))


def test_the_node_control_server_binds_its_own_address_at_users_priority(monkeypatch):
    monkeypatch.setenv("ROTA_WEB_ROLE", "control")
    monkeypatch.setenv("ROTA_CONTROL_BIND", "127.0.0.1:18002")
    monkeypatch.delenv("ROTA_CONTROL_WEB_WORKERS", raising=False)
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    conf = runpy.run_path(str(CONF))
    assert (conf["bind"], conf["workers"], conf["proc_name"]) == (["127.0.0.1:18002"], 1, "rota-control")
    assert os.getpriority(os.PRIO_PROCESS, 0) == ours  # not the nodes' server's nice: heartbeats are not put off

    monkeypatch.setenv("ROTA_CONTROL_WEB_WORKERS", "3")
    assert runpy.run_path(str(CONF))["workers"] == 3
    monkeypatch.setenv("ROTA_WEB_ROLE", "heartbeats")
    with pytest.raises(ImproperlyConfigured, match="ROTA_WEB_ROLE must be web, nodes or control"):
        runpy.run_path(str(CONF))
