"""The real processes of end-to-end tests get service ports of their own (tests/processes.py), never the
site's range that a `make dev` on the same machine publishes its notebooks and replicas on."""

import socket

from django.conf import settings


def test_the_worker_and_agents_hand_out_free_ports_away_from_the_sites_range(worker_env):
    low, high = map(int, worker_env["ROTA_SERVICE_PORTS"].split("-"))
    assert (low, high) == settings.ROTA_SERVICE_PORTS  # the test process and its subprocesses agree
    assert high - low + 1 == 32 and 61000 <= low and high <= 65535
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", low))
