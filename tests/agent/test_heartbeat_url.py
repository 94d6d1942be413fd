"""Heartbeats at the node-control server a register answer names (``heartbeat_url``), and at the agent's
``--portal`` when that server cannot be reached (docs/node-protocol.md, "Register")."""

import socket

import pytest

from scheduler.agent.client import PortalClient, PortalUnavailable
from tests.agent.standin_portal import TOKEN, StandInPortal

BEAT = {"seq": 1, "running": [], "gpus": [], "telemetry": []}
REGISTER = {"hostname": "node-a", "gpus": []}


@pytest.fixture
def control():
    server = StandInPortal().start()
    yield server
    server.stop()


def _closed_port_url() -> str:
    with socket.socket() as sock:  # a port nothing listens on once it is closed
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_heartbeats_go_to_the_control_server_a_register_answer_names(portal, control):
    portal.heartbeat_url = control.url + "/"
    client = PortalClient(portal.url, TOKEN)
    client.heartbeat(BEAT)
    assert (len(portal.heartbeats), len(control.heartbeats)) == (1, 0)  # before it registered: its --portal

    client.register(REGISTER)
    client.heartbeat({**BEAT, "seq": 2})
    client.heartbeat({**BEAT, "seq": 3})
    assert [beat["seq"] for beat in control.heartbeats] == [2, 3]
    assert len(portal.heartbeats) == 1
    assert client.heartbeat_url == control.url


def test_a_register_answer_without_one_brings_the_heartbeats_back(portal, control):
    portal.heartbeat_url = control.url
    client = PortalClient(portal.url, TOKEN)
    client.register(REGISTER)
    portal.heartbeat_url = ""
    client.register(REGISTER)
    client.heartbeat(BEAT)
    assert (len(portal.heartbeats), len(control.heartbeats)) == (1, 0)


def test_a_control_server_that_cannot_be_reached_leaves_the_heartbeat_to_the_portal(portal):
    portal.heartbeat_url = _closed_port_url()
    client = PortalClient(portal.url, TOKEN)
    client.register(REGISTER)
    assert "assignments" in client.heartbeat(BEAT)
    assert len(portal.heartbeats) == 1
    assert client.heartbeat_url == portal.heartbeat_url  # tried again first at the next heartbeat


def test_a_busy_control_server_is_not_bypassed(portal, control):
    portal.heartbeat_url = control.url
    control.down = True  # answers 503: reached, and busy or failing; the node tries it again at its next beat
    client = PortalClient(portal.url, TOKEN)
    client.register(REGISTER)
    with pytest.raises(PortalUnavailable, match="503"):
        client.heartbeat(BEAT)
    assert portal.heartbeats == []


def test_an_address_that_is_not_an_http_url_is_not_followed(portal):
    portal.heartbeat_url = "file:///etc/passwd"
    client = PortalClient(portal.url, TOKEN)
    client.register(REGISTER)
    client.heartbeat(BEAT)
    assert client.heartbeat_url == portal.url
    assert len(portal.heartbeats) == 1


def test_a_rotated_token_reaches_the_control_server_too(portal, control, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    portal.heartbeat_url = control.url
    client = PortalClient(portal.url, TOKEN, token_file=token_file)
    client.register(REGISTER)
    control.token = portal.token = "rotated"
    token_file.write_text("rotated")
    client.heartbeat(BEAT)
    assert len(control.heartbeats) == 1
