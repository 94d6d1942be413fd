"""The reliability battery. Tests marked ``soak`` (restarts of the shared PostgreSQL and Redis, long runs)
are left out of the default run: ``make soak`` (``ROTA_SOAK=1``) or ``-m soak`` selects them."""

import os

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "soak: long or disruptive fault tests (make soak)")


def pytest_collection_modifyitems(config, items):
    if os.environ.get("ROTA_SOAK") == "1" or "soak" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="soak tier: run with make soak")
    for item in items:
        if "soak" in item.keywords:
            item.add_marker(skip)
