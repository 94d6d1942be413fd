"""How long an executor takes from ``start()`` to the job's command running, container beside process.

    .venv/bin/python bench/executor_start.py [--runs 20] [--json]

Each run starts one attempt whose command prints a line, as a team's uid (the agent must be root), and
measures ``start()`` returning (the agent's own share, image check included) and the first byte in the
job's log (the command runs). The agent part of submit -> running; the portal's cycle and the heartbeat
interval come on top.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler.agent.executors import ContainerExecutor, Executor, ProcessExecutor  # noqa: E402
from scheduler.agent.jobs import Assignment  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def measure(ex: Executor, runs: int, image: str | None) -> dict[str, float]:
    """p50/p90 of start() and of start -> first output, in seconds."""
    returned, running = [], []
    for job_id in range(1, runs + 1):
        assignment = Assignment.from_wire({
            "job_id": job_id, "attempt": 1, "command": "echo up", "image": image, "grace_period_s": 1,
            "run_as": {"uid": 20001, "gid": 20001, "team": "vision"}, "limits": {"memory_mb": 256, "pids": 64},
        })  # fmt: skip
        log = ex.work_dir / "logs" / f"{job_id}-1.log"
        began = time.perf_counter()
        event = ex.start(assignment)
        returned.append(time.perf_counter() - began)
        assert event.type == "started", event
        while not log.exists() or log.stat().st_size == 0:
            time.sleep(0.002)
        running.append(time.perf_counter() - began)
        while ex.jobs:
            ex.poll()
            time.sleep(0.01)

    def pct(values: list[float], q: int) -> float:
        return round(statistics.quantiles(values, n=10)[q // 10 - 1] if q != 50 else statistics.median(values), 3)

    return {"start_p50_s": pct(returned, 50), "running_p50_s": pct(running, 50), "running_p90_s": pct(running, 90)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    subprocess.run([str(ROOT / "scripts" / "build-images.sh")], check=True, stdout=subprocess.DEVNULL)
    with tempfile.TemporaryDirectory() as work:
        results = {
            "process": measure(ProcessExecutor(Path(work) / "process"), args.runs, None),
            "container": measure(ContainerExecutor(Path(work) / "container", fake_gpus=True), args.runs,
                                 "localhost/rota/busybox:1"),
        }
    if args.json:
        print(json.dumps(results))
    else:
        for name, figures in results.items():
            print(f"{name:9} " + "  ".join(f"{key} {value:.3f}" for key, value in figures.items()))


if __name__ == "__main__":
    main()
