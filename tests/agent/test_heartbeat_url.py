"""Heartbeats at the node-control server a register answer names (``heartbeat_url``), and at the agent's
``--portal`` when that server cannot be reached (docs/node-protocol.md, "Register")."""

import socket

import pytest

from scheduler.agent.client import PortalClient, PortalError, PortalUnavailable
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


def _told(portal, control, url):
    """The portal and its control server name ``url`` in their answers, as the real ones do (one setting)."""
    portal.heartbeat_url = control.heartbeat_url = url


def test_heartbeats_go_to_the_control_server_a_register_answer_names(portal, control):
    _told(portal, control, control.url + "/")
    client = PortalClient(portal.url, TOKEN)
    client.heartbeat(BEAT)  # before it registered: at its --portal, whose answer names the control server
    assert (len(portal.heartbeats), len(control.heartbeats)) == (1, 0)

    client.register(REGISTER)
    client.heartbeat({**BEAT, "seq": 2})
    client.heartbeat({**BEAT, "seq": 3})
    assert [beat["seq"] for beat in control.heartbeats] == [2, 3]
    assert len(portal.heartbeats) == 1
    assert client.heartbeat_url == control.url


def test_an_answer_without_one_brings_the_heartbeats_back(portal, control):
    _told(portal, control, control.url)
    client = PortalClient(portal.url, TOKEN)
    client.register(REGISTER)
    client.heartbeat(BEAT)
    _told(portal, control, "")  # the site dropped the server: said in the next heartbeat's answer
    client.heartbeat({**BEAT, "seq": 2})
    client.heartbeat({**BEAT, "seq": 3})
    assert [beat["seq"] for beat in control.heartbeats] == [1, 2]
    assert [beat["seq"] for beat in portal.heartbeats] == [3]


def test_a_control_server_that_is_not_there_leaves_the_heartbeats_to_the_portal_for_a_while(portal, control):
    portal.heartbeat_url = _closed_port_url()
    client = PortalClient(portal.url, TOKEN)
    client.register(REGISTER)
    assert "assignments" in client.heartbeat(BEAT)
    assert "assignments" in client.heartbeat({**BEAT, "seq": 2})  # not tried again at once: no connect wait
    assert len(portal.heartbeats) == 2
    assert client.heartbeat_url == portal.heartbeat_url  # tried again once the back-off has passed

    _told(portal, control, control.url)
    client.register(REGISTER)  # named anew (a new address): tried at once
    client.heartbeat({**BEAT, "seq": 1})
    assert len(control.heartbeats) == 1


@pytest.mark.parametrize(("status", "bypassed"), [(502, True), (503, True), (404, True), (405, True),
                                                  (500, False), (504, False), (429, False)])
def test_which_failed_answers_of_the_control_server_send_the_heartbeat_to_the_portal(portal, control, status,
                                                                                    bypassed):
    _told(portal, control, control.url)
    client = PortalClient(portal.url, TOKEN)
    client.register(REGISTER)
    control.heartbeat_answers = [(status, None)]
    if bypassed:  # the server is not there (a proxy's answer for it, or no such route): taken by --portal
        assert "assignments" in client.heartbeat(BEAT)
        assert len(portal.heartbeats) == 1
    else:  # reached, and failing or busy: it may have taken the heartbeat; the node tries it at its next beat
        with pytest.raises(PortalError):
            client.heartbeat(BEAT)
        assert portal.heartbeats == []


def test_a_control_server_that_keeps_failing_is_left_after_two_failures_in_a_row(portal, control):
    _told(portal, control, control.url)
    client = PortalClient(portal.url, TOKEN)
    client.register(REGISTER)
    control.heartbeat_answers = [(500, None), (504, None), (500, None)]
    for seq in (1, 2):  # each may have been taken: raised, never resent elsewhere
        with pytest.raises(PortalUnavailable):
            client.heartbeat({**BEAT, "seq": seq})
    assert portal.heartbeats == []
    client.heartbeat({**BEAT, "seq": 3})  # the next ones, new seqs, go to --portal for the back-off
    client.heartbeat({**BEAT, "seq": 4})
    assert [beat["seq"] for beat in portal.heartbeats] == [3, 4]
    assert len(control.heartbeat_answers) == 1  # not asked meanwhile


def test_one_failure_between_answers_does_not_leave_the_control_server(portal, control):
    _told(portal, control, control.url)
    client = PortalClient(portal.url, TOKEN)
    client.register(REGISTER)
    for seq in (1, 3):
        control.heartbeat_answers = [(500, None)]
        with pytest.raises(PortalUnavailable):
            client.heartbeat({**BEAT, "seq": seq})
        client.heartbeat({**BEAT, "seq": seq + 1})
    assert [beat["seq"] for beat in control.heartbeats] == [2, 4]
    assert portal.heartbeats == []


def test_a_proxys_503_with_retry_after_is_not_bypassed(portal, control):
    _told(portal, control, control.url)
    client = PortalClient(portal.url, TOKEN)
    client.register(REGISTER)
    control.heartbeat_answers = [(503, 5)]
    with pytest.raises(PortalUnavailable, match="503"):
        client.heartbeat(BEAT)
    assert portal.heartbeats == []
    client.heartbeat({**BEAT, "seq": 2})
    assert len(control.heartbeats) == 1


@pytest.mark.parametrize("named", ["file:///etc/passwd", "http://user:secret@127.0.0.1:1", "control:8002",
                                   "http://[::1", "http://", "http://control/api/v1", "http://control:99999",
                                   8002])
def test_an_address_that_is_not_an_http_server_root_without_a_user_is_not_followed(portal, named):
    portal.heartbeat_url = named
    client = PortalClient(portal.url, TOKEN)
    client.register(REGISTER)
    client.heartbeat(BEAT)
    assert client.heartbeat_url == portal.url
    assert len(portal.heartbeats) == 1


def test_an_https_portal_never_sends_its_heartbeats_in_clear(portal):
    client = PortalClient("https://rota.example.com", TOKEN)
    client._heartbeat_to("http://control.example.com:8002")
    assert client.heartbeat_url == "https://rota.example.com"
    client._heartbeat_to("https://control.example.com:8002")
    assert client.heartbeat_url == "https://control.example.com:8002"


def test_a_rotated_token_reaches_the_control_server_too(portal, control, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    _told(portal, control, control.url)
    client = PortalClient(portal.url, TOKEN, token_file=token_file)
    client.register(REGISTER)
    control.token = portal.token = "rotated"
    token_file.write_text("rotated")
    client.heartbeat(BEAT)
    assert len(control.heartbeats) == 1
