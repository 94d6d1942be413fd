"""The engine imports without Django (or anything else from the web side)."""

import subprocess
import sys

PURE_PACKAGES = ["scheduler.core"]

SCRIPT = """
import sys
for name in ("django", "celery", "rest_framework", "psycopg", "redis"):
    sys.modules[name] = None  # any import of these now raises ImportError
import importlib
mod = importlib.import_module({name!r})
import scheduler.core.policies, scheduler.core.reasons  # noqa
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("django", "celery", "rest_framework"))
assert not [m for m in loaded if sys.modules[m] is not None], loaded
print("ok")
"""


def test_it_imports_scheduler_core_without_django():
    for name in PURE_PACKAGES:
        result = subprocess.run([sys.executable, "-c", SCRIPT.format(name=name)], capture_output=True, text=True,
                                check=False)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == "ok"


def test_it_never_imports_a_clock_in_the_core():
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[2] / "scheduler" / "core"
    for path in sorted(root.glob("*.py")):
        text = path.read_text()
        for banned in ("import time", "from time", "import datetime", "from datetime", "import random"):
            assert banned not in text, f"{path.name} uses {banned!r}: the core must not read a clock"


def test_the_core_type_checks(tmp_path):
    """The core's annotations are checked (mypy): they document the contracts between its parts."""
    import pathlib

    from mypy import api

    core = pathlib.Path(__file__).resolve().parents[2] / "scheduler" / "core"
    stdout, stderr, status = api.run(["--cache-dir", str(tmp_path), "--no-error-summary", str(core)])
    assert status == 0, stdout + stderr
