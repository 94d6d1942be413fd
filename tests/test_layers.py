"""The one-way dependencies of issue 21 (part 6): the import-linter contracts in pyproject.toml hold.

`make lint` runs the same check; this test puts it in `make test` too, so a framework import in the
core, the simulator, the agent or the Slurm bridge (or an app import in the core) fails the suite.
"""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def test_import_contracts_are_kept():
    result = subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout
