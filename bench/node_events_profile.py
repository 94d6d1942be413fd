"""What a node's batch of job events costs the portal, in-process: ``python bench/node_events_profile.py
[--sizes 1,5,20] [--rounds R]``.

On a scratch database (``rota_node_events_profile`` by default, dropped and re-created; never the dev or test one)
it seeds one team and one registered node of 32 fake GPUs (``bench/load.py``'s world, without a backlog), then,
for each batch size N and each of R rounds, submits N jobs, runs a cycle (they are admitted on the node) and sends
``POST /api/v1/node/events/`` through Django's test client under the production settings (no HTTP, no server):
N starts, then N exits (code 0), then, for N jobs admitted again, a mixed batch of N/2 exits and N/2 starts (the
agent's pass: the exits since the last pass and this pass's starts; the jobs ended are started untimed first).
Printed per kind and size: SQL queries per batch (counted by an execute wrapper), the median wall and CPU time of
this process per batch (the portal's side, PostgreSQL's excluded: steadier than wall time on a shared machine)
and the CPU per event.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from load import production_in_process, seed  # noqa: E402

GPUS = 32


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1,5,20", help="events per batch, comma-separated (at most 32)")
    parser.add_argument("--rounds", type=int, default=15, help="batches timed per kind and size")
    parser.add_argument("--database", default="rota_node_events_profile")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="also cProfile the timed batches and print the N costliest functions (cumulative)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    production_in_process(args.database)
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import setup_test_environment

    from scheduler.cycle import run_cycle
    from scheduler.services.jobs import job_submit

    setup_test_environment()
    seeded = seed(SimpleNamespace(jobs=0, nodes=1, gpus_per_node=GPUS, teams=1, guaranteed=0.0))
    [(name, token)] = seeded["node_tokens"].items()
    user = get_user_model().objects.get(username="user0")
    client = Client()
    auth = {"HTTP_AUTHORIZATION": f"Node {token}"}
    body = {"hostname": name, "agent_version": "profile", "gpu_backend": "fake", "cpus": 64, "memory_mb": 512 * 1024,
            "gpus": [{"index": i, "uuid": f"GPU-{name}-{i}", "model": "h100-80gb", "memory_mb": 81559}
                     for i in range(GPUS)]}
    client.post("/api/v1/node/register/", body, content_type="application/json", **auth)

    def admitted(n: int) -> list[int]:
        jobs = [job_submit(user=user, name="p", command="true", gpu_model="h100-80gb").pk for _ in range(n)]
        run_cycle()
        return jobs

    def post(events: list[dict]) -> None:
        answer = client.post("/api/v1/node/events/", {"events": events}, content_type="application/json", **auth)
        assert answer.status_code == 200, answer.content
        assert not any("status" in r for r in answer.json()["results"]), answer.content

    def started(jobs):
        return [{"job_id": pk, "attempt": 1, "type": "started", "pid": 1} for pk in jobs]

    def exited(jobs):
        return [{"job_id": pk, "attempt": 1, "type": "exited", "exit_code": 0} for pk in jobs]

    profiler = cProfile.Profile(time.process_time) if args.profile else None  # CPU, not waits
    figures: dict[str, dict] = {}
    for n in sizes:
        for kind in ("starts", "exits", "mixed") if n > 1 else ("starts", "exits"):
            walls, cpus, queries = [], [], []
            for _ in range(args.rounds + 2):  # the first two warm up
                jobs = admitted(n)
                if kind == "starts":
                    events = started(jobs)
                elif kind == "exits":
                    post(started(jobs))
                    events = exited(jobs)
                else:
                    half = n // 2  # ended in this batch: started untimed first
                    post(started(jobs[:half]))
                    events = exited(jobs[:half]) + started(jobs[half:])
                seen: list[str] = []

                def counted(execute, sql, params, many, context, seen=seen):
                    seen.append(sql)
                    return execute(sql, params, many, context)

                with connection.execute_wrapper(counted):
                    wall, cpu = time.perf_counter(), time.process_time()
                    if profiler is not None:
                        profiler.runcall(post, events)
                    else:
                        post(events)
                    walls.append((time.perf_counter() - wall) * 1000)
                    cpus.append((time.process_time() - cpu) * 1000)
                queries.append(len(seen))
                if kind == "starts":
                    post(exited(jobs))
                elif kind == "mixed":
                    post(exited(jobs[n // 2:]))
            walls, cpus = walls[2:], cpus[2:]
            figures[f"{kind} x{n}"] = {"queries": queries[-1], "wall_ms": round(statistics.median(walls), 2),
                                       "cpu_ms": round(statistics.median(cpus), 2),
                                       "cpu_ms_per_event": round(statistics.median(cpus) / n, 2)}
    if profiler is not None:
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(args.profile)
        if os.environ.get("CALLEES"):
            pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_callees(os.environ["CALLEES"])
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    for what, f in figures.items():
        print(f"{what:>10}: {f['queries']:>4} queries, median {f['wall_ms']:>7} ms wall, {f['cpu_ms']:>7} ms CPU "
              f"({f['cpu_ms_per_event']} ms per event)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
