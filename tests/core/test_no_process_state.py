"""Nothing in the core outlives a cycle: no module holds a mutable container, and no module touches the
garbage collector (indices and caches belong to the session)."""

import importlib
import pkgutil
from collections import deque
from pathlib import Path

import scheduler.core


def _modules():
    for info in pkgutil.walk_packages(scheduler.core.__path__, "scheduler.core."):
        yield importlib.import_module(info.name)


def test_no_core_module_holds_a_mutable_container():
    found = []
    for module in _modules():
        for name, value in vars(module).items():
            if name.startswith("__"):
                continue
            if isinstance(value, (dict, list, set, bytearray, deque)):
                found.append(f"{module.__name__}.{name}")
    assert found == []


def test_no_core_module_touches_the_garbage_collector():
    root = Path(scheduler.core.__file__).parent
    offenders = [str(p.relative_to(root)) for p in root.rglob("*.py")
                 if "import gc" in p.read_text() or "gc.disable" in p.read_text()]
    assert offenders == []


def test_two_cycles_over_the_same_snapshot_decide_alike_and_share_no_session():
    from scheduler.bench import build
    from scheduler.core import schedule

    snapshot = build(300, 40)
    assert schedule(snapshot) == schedule(snapshot)
