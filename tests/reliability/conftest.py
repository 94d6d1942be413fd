"""The reliability battery. Tests marked ``soak`` (restarts of the shared PostgreSQL and Redis, long runs)
are left out of the default run: ``make soak`` (``ROTA_SOAK=1``) or ``-m soak`` selects them."""

import os


def pytest_configure(config):
    config.addinivalue_line("markers", "soak: long or disruptive fault tests (make soak)")


def pytest_collection_modifyitems(config, items):
    if os.environ.get("ROTA_SOAK") == "1" or "soak" in (config.getoption("-m") or ""):
        return
    # Deselected, not skipped: the soak tier is a separate run (make soak), not a missing feature.
    soak = [item for item in items if "soak" in item.keywords]
    if soak:
        config.hook.pytest_deselected(items=soak)
        items[:] = [item for item in items if "soak" not in item.keywords]
