"""The agent's HTTP client takes the environment's proxy settings once, when it is made (``requests`` would
read them, and ``~/.netrc``, at every request): a proxy named there is still used, ``NO_PROXY`` still
bypasses it, and a ``~/.netrc`` entry for the portal never replaces the node's token."""

import pytest

from scheduler.agent.client import PortalClient, PortalUnavailable
from tests.agent.standin_portal import TOKEN, StandInPortal

BEAT = {"seq": 1, "running": [], "gpus": [], "telemetry": []}


@pytest.fixture
def no_proxy_env(monkeypatch):
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    return monkeypatch


def test_a_proxy_named_in_the_environment_is_used(portal: StandInPortal, no_proxy_env) -> None:
    no_proxy_env.setenv("http_proxy", "http://127.0.0.1:9")  # nothing listens there
    client = PortalClient(portal.url, TOKEN)
    with pytest.raises(PortalUnavailable, match="ProxyError"):
        client.heartbeat(BEAT)


def test_no_proxy_still_bypasses_it(portal: StandInPortal, no_proxy_env) -> None:
    no_proxy_env.setenv("http_proxy", "http://127.0.0.1:9")
    no_proxy_env.setenv("no_proxy", "127.0.0.1")
    assert "assignments" in PortalClient(portal.url, TOKEN).heartbeat(BEAT)


def test_a_netrc_entry_never_replaces_the_node_token(portal: StandInPortal, no_proxy_env, tmp_path) -> None:
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login someone password secret\n")
    netrc.chmod(0o600)
    no_proxy_env.setenv("NETRC", str(netrc))
    assert "assignments" in PortalClient(portal.url, TOKEN).heartbeat(BEAT)  # not 401: the token went
