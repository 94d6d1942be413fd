"""Where an API request's time goes, in-process: ``python bench/api_profile.py [--jobs N] [--requests R]``.

On a scratch database (``rota_api_profile`` by default, dropped and re-created; never the dev or test one) it
seeds the load test's world (``bench/load.py``: teams, users with API tokens, nodes with their tokens, N pending
jobs; the nodes registered, a few jobs running on them), then sends the requests that ``make load`` sends
through Django's test client under the production settings (no HTTP, no server: the request path alone):
submit (``POST /api/v1/jobs/``), the job list (``GET /api/v1/jobs/?limit=50``), a node's heartbeat (as ``make load``
sends it: its seq; and as the agent does: with its 8 GPUs' health and samples) and the check of its long-poll
(``POST /api/v1/node/wait/`` up to where the ASGI server takes the wait over). For each
it prints the SQL queries per request (counted by an execute wrapper), the median and p90 time of R requests
and the median CPU time this process spent on one (the portal's side of it, PostgreSQL's excluded: steadier than
wall time on a shared machine), and the mean CPU time its PostgreSQL backend spent on one (read from ``/proc``
when the server runs on this machine: it shares the cores);
``--profile KIND`` adds cProfile's top functions for that kind (CPU time, with their callees or, with
``--profile-sort tottime``, their own).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from load import production_in_process, seed  # noqa: E402

KINDS = ("submit", "list", "heartbeat", "agent-heartbeat", "wait")


def _requests(client, tokens: dict, node: tuple[str, str], wake):
    """One request of each kind, as a function returning its status code."""
    from scheduler.api.node import WAIT_ON_LOOP

    api = {"HTTP_AUTHORIZATION": f"Token {tokens['api_tokens'][0]}"}
    node_auth = {"HTTP_AUTHORIZATION": f"Node {node[1]}"}
    count = iter(range(10**9))
    seq = iter(range(1, 10**9))

    def submit():
        body = {"name": f"p-{next(count)}", "command": "true", "gpu_model": "h100-80gb", "gpus": 1}
        status = client.post("/api/v1/jobs/", body, content_type="application/json", **api).status_code
        wake.cycle_claim()  # as a cycle taking each wake-up would: every submit then sends its own (the most)
        return status

    def listing():
        return client.get("/api/v1/jobs/?limit=50", **api).status_code

    def heartbeat():
        return client.post("/api/v1/node/heartbeat/", {"seq": next(seq)}, content_type="application/json",
                           **node_auth).status_code

    def agent_heartbeat():  # as the node agent sends it: its GPUs' health and a round of samples (make load's: seq)
        at = datetime.now(UTC)
        uuids = [f"GPU-{node[0]}-{i}" for i in range(8)]
        body = {"seq": next(seq), "gpus": [{"uuid": uuid, "healthy": True} for uuid in uuids],
                "telemetry": [{"uuid": uuid, "at": at.isoformat(), "util_pct": 87.5, "mem_used_mb": 40000.0,
                               "temperature_c": 61.0, "power_w": 512.0, "sm_clock_mhz": 1980.0, "ecc_uncorrected": 0,
                               "xid": None} for uuid in uuids]}
        return client.post("/api/v1/node/heartbeat/", body, content_type="application/json", **node_auth).status_code

    def wait():  # the check part of a long-poll: authenticated and valid, the wait itself handed to the event loop
        return client.post("/api/v1/node/wait/", {"timeout_s": 30}, content_type="application/json",
                           **{WAIT_ON_LOOP: lambda *wait: None}, **node_auth).status_code

    return {"submit": submit, "list": listing, "heartbeat": heartbeat, "agent-heartbeat": agent_heartbeat, "wait": wait}


def _backend_cpu_s(connection) -> float | None:
    """CPU seconds this process's PostgreSQL backend has used so far (its ``/proc`` entry: a server on this
    machine), or None where it cannot be read: the database's share of a request, on the same cores."""
    from load import _cpu_s

    if connection.settings_dict["HOST"] not in ("", "localhost", "127.0.0.1", "::1"):
        return None  # its pid names no process here
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    return _cpu_s(pid)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10000, help="pending jobs queued first (make load: 10000)")
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--requests", type=int, default=100, help="requests of each kind timed")
    parser.add_argument("--kind", choices=KINDS, action="append", default=[], help="only these kinds (default: all)")
    parser.add_argument("--profile", choices=KINDS, action="append", default=[])
    parser.add_argument("--profile-lines", type=int, default=45, help="functions shown per profile")
    parser.add_argument("--profile-sort", default="cumulative", choices=["cumulative", "tottime"],
                        help="order of the profile's functions: with their callees, or their own time")
    parser.add_argument("--database", default="rota_api_profile")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    production_in_process(args.database)
    from django.db import connection
    from django.test import Client
    from django.test.utils import setup_test_environment

    from scheduler import wake
    from scheduler.cycle import run_cycle

    setup_test_environment()  # the test client's response hooks; DEBUG stays off
    seeded = seed(SimpleNamespace(jobs=args.jobs, nodes=args.nodes, gpus_per_node=8, teams=10, guaranteed=0.0))
    client = Client()
    node = next(iter(seeded["node_tokens"].items()))
    for name, token in seeded["node_tokens"].items():  # registered, so the cycle places work on them
        body = {"hostname": name, "agent_version": "profile", "gpu_backend": "fake", "cpus": 64,
                "memory_mb": 512 * 1024, "gpus": [{"index": i, "uuid": f"GPU-{name}-{i}", "model": "h100-80gb",
                                                   "memory_mb": 81559} for i in range(8)]}
        client.post("/api/v1/node/register/", body, content_type="application/json",
                    HTTP_AUTHORIZATION=f"Node {token}")
    run_cycle()  # some of the backlog runs: heartbeats carry assignments, the list shows allocations
    calls = _requests(client, seeded, node, wake)
    figures = {}
    for kind in args.kind or KINDS:
        call = calls[kind]
        for _ in range(3):  # warm: imports, first connection
            call()
        queries: list[str] = []

        def counted(execute, sql, params, many, context, seen=queries):
            seen.append(sql)
            return execute(sql, params, many, context)

        with connection.execute_wrapper(counted):
            status = call()
        times, cpu = [], []
        backend_started = _backend_cpu_s(connection)
        for _ in range(args.requests):
            started, cpu_started = time.perf_counter(), time.process_time()
            call()
            times.append((time.perf_counter() - started) * 1000)
            cpu.append((time.process_time() - cpu_started) * 1000)
        backend = _backend_cpu_s(connection)
        times.sort()
        figures[kind] = {"status": status, "queries": len(queries), "median_ms": round(statistics.median(times), 2),
                         "p90_ms": round(times[int(0.9 * len(times))], 2),
                         "cpu_ms": round(statistics.median(cpu), 2),
                         "postgres_cpu_ms": None if backend is None else round(
                             (backend - backend_started) * 1000 / args.requests, 2),
                         "sql": [q[:160] for q in queries]}
        if kind in args.profile:
            profile = cProfile.Profile(time.process_time)  # CPU time: what other work on the box does not add
            profile.enable()
            for _ in range(args.requests):
                call()
            profile.disable()
            out = io.StringIO()
            pstats.Stats(profile, stream=out).sort_stats(args.profile_sort).print_stats(args.profile_lines)
            figures[kind]["profile"] = out.getvalue()
    if args.json:
        print(json.dumps({k: {x: y for x, y in v.items() if x != "profile"} for k, v in figures.items()}, indent=2))
        return 0
    for kind, f in figures.items():
        print(f"{kind:>10}: HTTP {f['status']}, {f['queries']} queries, median {f['median_ms']} ms, "
              f"p90 {f['p90_ms']} ms; this process's CPU {f['cpu_ms']} ms (median), its PostgreSQL backend's "
              f"{f['postgres_cpu_ms']} ms (mean)")
        for sql in f["sql"]:
            print(f"{'':>12}{sql}")
        if "profile" in f:
            print(f["profile"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
