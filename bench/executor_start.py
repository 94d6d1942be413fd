"""How long an executor takes from ``start()`` to the job's command running, container beside process.

    .venv/bin/python bench/executor_start.py [--runs 20] [--only process] [--rota-root CHECKOUT] [--json]

Each run starts one attempt whose command prints a line, as a team's uid (the agent must be root), and
measures ``start()`` returning (the agent's own share, image check included) and the first byte in the
job's log (the command runs). The agent part of submit -> running; the portal's cycle and the heartbeat
interval come on top. It also gives the CPU a job costs from its start until the agent reaped its shim:
the agent's own (``agent_cpu_ms``) and its children's (``shim_cpu_ms``: the shim and the job's command; for
a container, podman too). ``--rota-root`` measures another checkout's executors (a before/after comparison).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if "--rota-root" in sys.argv:  # before the imports: the executors measured are that checkout's
    ROOT = Path(sys.argv[sys.argv.index("--rota-root") + 1]).resolve()
sys.path.insert(0, str(ROOT))

from scheduler.agent.executors import ContainerExecutor, Executor, ProcessExecutor  # noqa: E402
from scheduler.agent.jobs import Assignment  # noqa: E402


def cpu_s(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def measure(ex: Executor, runs: int, image: str | None) -> dict[str, float]:
    """p50/p90 of start() and of start -> first output, in seconds; CPU per job, in ms."""
    returned, running = [], []
    agent_before, children_before = cpu_s(resource.RUSAGE_SELF), cpu_s(resource.RUSAGE_CHILDREN)
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

    agent_ms = (cpu_s(resource.RUSAGE_SELF) - agent_before) * 1000 / runs
    children_ms = (cpu_s(resource.RUSAGE_CHILDREN) - children_before) * 1000 / runs
    return {"start_p50_s": pct(returned, 50), "running_p50_s": pct(running, 50), "running_p90_s": pct(running, 90),
            "agent_cpu_ms": round(agent_ms, 2), "shim_cpu_ms": round(children_ms, 2)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--only", choices=("process", "container"), help="measure one executor")
    parser.add_argument("--rota-root", type=Path, help="measure this checkout's executors (before/after)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as work:
        if args.only in (None, "process"):
            results["process"] = measure(ProcessExecutor(Path(work) / "process"), args.runs, None)
        if args.only in (None, "container"):
            subprocess.run([str(ROOT / "scripts" / "build-images.sh")], check=True, stdout=subprocess.DEVNULL)
            results["container"] = measure(ContainerExecutor(Path(work) / "container", fake_gpus=True), args.runs,
                                           "localhost/rota/busybox:1")
    if args.json:
        print(json.dumps(results))
    else:
        for name, figures in results.items():
            print(f"{name:9} " + "  ".join(f"{key} {value:.3f}" for key, value in figures.items()))


if __name__ == "__main__":
    main()
