"""Loopback load test of the whole portal: ``python bench/load.py [--jobs N] [--nodes M] [--clients C]``.

On a database of its own (``rota_load``, dropped and re-created; never the dev or test database) it starts the
portal (gunicorn's uvicorn workers under production settings, as ``make serve`` runs it, on 127.0.0.1: users'
server, the nodes' own and the node-control server for their heartbeats; ``--no-control``, ``--one-server`` or
``--server runserver`` to compare) and a scheduling-cycle loop (a
separate process, as the Celery worker would run it), queues N pending jobs, registers M fake nodes through the
node API with their own tokens and drives each as an agent would (``bench/loadgen.py``: heartbeats at the interval
the portal tells each node, the long-poll, each node "runs" what it is assigned for a short while and reports its
starts and exits in batches), and runs C concurrent API clients that submit and list jobs: closed loop by default
(each sends its next request when the last is answered: a saturation test, its latency is C / throughput), or open
loop with ``--client-rate R`` (each sends R requests a second, Poisson arrivals, latency timed from when each
request was due). Bounded: every phase has a deadline. It prints, and with ``--json`` emits, submit throughput, API
p50/p99 latency, the heartbeat interval the nodes were told, cycle time, time to drain the backlog, the RSS of the
portal and cycle processes, the latencies window by window through the run (where the slow answers were), and the
invariant auditor's findings at the end (exit 1 if the auditor finds anything or the backlog did not drain).

Full size from the issue: ``--preset full`` (``--jobs 10000 --nodes 500 --clients 50 --client-rate 1``, the drain
bounded at 15 minutes: ``make load LOAD_ARGS="--preset full"``): 50 users each sending a request a second, what
50 people at terminals and scripts do, not 50 loops with no think time (``--client-rate 0`` for that saturation
figure); ``make load`` runs a reduced default that finishes in a few
minutes on a 2-core machine. The traffic (``bench/loadgen.py``) runs in processes of its own; one of the nodes
is a real node agent (fake GPUs, the process executor) so that its memory under the load is measured too.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from loadgen import Traffic  # noqa: E402


def _pctl(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _rss_mb(pid: int) -> dict[str, float]:
    """Current and peak resident memory of a process, MiB."""
    out = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line.split(":")[0]] = int(line.split()[1]) / 1024
    except FileNotFoundError:
        pass
    return {"rss_mb": round(out.get("VmRSS", 0), 1), "peak_rss_mb": round(out.get("VmHWM", 0), 1)}


def _cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) a process has used so far, or None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except FileNotFoundError:
        return []


DEFAULT_REDIS_URL = "redis://localhost:6379/14"  # the benchmarks' Redis (api_profile, executors, latency, peer too)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _env(database_url: str) -> dict[str, str]:
    return {
        **os.environ, "DATABASE_URL": database_url, "DJANGO_SETTINGS_MODULE": "portal.settings", "DEBUG": "0",
        "SECRET_KEY": os.environ.get("ROTA_LOAD_SECRET_KEY", secrets.token_urlsafe(50)),
        "ALLOWED_HOSTS": "127.0.0.1,localhost", "SECURE_SSL_REDIRECT": "0", "LOG_LEVEL": "WARNING",
        "REDIS_URL": os.environ.get("ROTA_LOAD_REDIS_URL", DEFAULT_REDIS_URL),  # --redis-url sets it
        "PYTHONUNBUFFERED": "1",
        # The fake nodes run nothing (they only report): production's refusal of nodes whose executor does not
        # isolate tenants (ROTA_REQUIRE_ISOLATION) would turn every one of them away with 409.
        "ROTA_REQUIRE_ISOLATION": "0",
    }


def production_in_process(database: str) -> None:
    """Django set up in this process as the portal runs in production (``portal.settings_production``), on a
    fresh scratch ``database``: for the in-process profiles (``bench/api_profile.py``,
    ``bench/node_events_profile.py``)."""
    base_url = os.environ.get("ROTA_LOAD_DATABASE_URL", "postgres://postgres@localhost:5432")
    database_url = f"{base_url}/{database}"
    os.environ.update(_env(database_url))
    os.environ.update({"DJANGO_SETTINGS_MODULE": "portal.settings_production", "SECURE_SSL_REDIRECT": "0"})
    setup_database(database_url, database)
    import django

    django.setup()


CONF = {"web": "asgi", "nodes": "nodes", "control": "control"}  # deploy/gunicorn_<this>.conf.py, as make serve has
ROLES = tuple(CONF)  # of the servers, in the order started


def start_server(args, port: int, logs: Path, node_port: int | None = None, role: str = "web",
                 control_port: int | None = None) -> subprocess.Popen:
    """The portal as ``make serve`` runs it (gunicorn's uvicorn workers, ``deploy/gunicorn_asgi.conf.py``:
    the nodes' long-polls held on the event loop; production settings): users' server (``role`` web) and, with
    ``node_port``, the nodes' own (``role`` nodes), and with ``control_port`` the node-control server that takes
    their heartbeats (``role`` control, named in every register answer); or ``runserver`` to compare."""
    env = os.environ.copy()
    log = open(logs / f"server-{role}.log", "w")
    if args.server == "runserver":
        command = [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"]
    else:
        env.update({"DJANGO_SETTINGS_MODULE": "portal.settings_production", "SECURE_SSL_REDIRECT": "0",
                    "ROTA_BIND": f"127.0.0.1:{port}", "ROTA_STATIC_ROOT": str(logs / "static"),
                    "ROTA_NODE_BIND": f"127.0.0.1:{node_port}" if node_port else "",
                    "ROTA_CONTROL_BIND": f"127.0.0.1:{control_port}" if control_port else "",
                    "ROTA_NODE_HEARTBEAT_URL": f"http://127.0.0.1:{control_port}" if control_port else ""})
        if args.web_workers:
            env["ROTA_WEB_WORKERS"] = str(args.web_workers)
        if args.node_workers:
            env["ROTA_NODE_WEB_WORKERS"] = str(args.node_workers)
        if args.node_nice is not None:
            env["ROTA_NODE_WEB_NICE"] = str(args.node_nice)
        if args.web_threads:
            env["ROTA_WEB_THREADS"] = str(args.web_threads)
        if role == "web":  # once, before either server scans the files (the nodes' server starts after)
            subprocess.run([sys.executable, "manage.py", "collectstatic", "--noinput", "--verbosity", "0"],
                           cwd=ROOT, env=env, check=True)
        command = [str(Path(sys.executable).parent / "gunicorn"), "-c", f"deploy/gunicorn_{CONF[role]}.conf.py"]
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


# ------------------------------------------------------------------------------------------------------
# The cycle loop (a child process): run cycles back to back and print one JSON line per cycle that ran.


def cycle_loop() -> None:
    """Cycles back to back as a busy Celery worker runs them: each woken cycle rests after the last one as
    ``scheduler.tasks`` makes it (``ROTA_CYCLE_REST_PCT`` of that cycle's time, at most ``MAX_CYCLE_REST_S``;
    under this load there is always a wake-up waiting), and never less than 0.2 s."""
    import django

    django.setup()
    from django.conf import settings
    from django.db import close_old_connections

    from scheduler.cycle import run_cycle
    from scheduler.wake import MAX_CYCLE_REST_S

    while True:
        close_old_connections()
        started, cpu = time.perf_counter(), time.process_time()
        try:
            report = run_cycle()
        except Exception as exc:  # noqa: BLE001 - like the Celery task: the next cycle retries
            print(json.dumps({"error": f"{type(exc).__name__}: {exc}"[:300]}), flush=True)
            close_old_connections()
            time.sleep(0.2)
            continue
        elapsed = time.perf_counter() - started
        if report.ran:
            print(json.dumps({"ms": elapsed * 1000, "cpu_ms": (time.process_time() - cpu) * 1000,
                              "started": report.started, "pending": report.pending, "phases": report.phases_ms}),
                  flush=True)
        time.sleep(max(0.2, min(elapsed * settings.ROTA_CYCLE_REST_PCT / 100, MAX_CYCLE_REST_S)))


# ------------------------------------------------------------------------------------------------------
# Setup, in this process, on the load database.


def setup_database(database_url: str, name: str) -> None:
    import psycopg

    admin = database_url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def seed(args) -> dict:
    """Teams, users with API tokens, one pool, quotas, nodes with tokens, and the pending backlog."""
    from django.core.management import call_command
    from rest_framework.authtoken.models import Token

    from portal.models import Membership, Team
    from scheduler.models import GpuModel, Job, JobTransition, Node, NodeToken, Pool, PriorityClass, Quota
    from scheduler.services.common import db_now

    call_command("migrate", verbosity=0)
    from django.contrib.auth import get_user_model

    User = get_user_model()
    model = GpuModel.objects.create(name="h100-80gb", memory_mb=81559)
    pool = Pool.objects.create(name="load")
    pc = PriorityClass.objects.create(name="training", value=500, preemptible=True, grace_period_s=1)
    teams, users, tokens = [], [], []
    gpus_total = args.nodes * args.gpus_per_node
    for i in range(args.teams):
        team = Team.objects.create(name=f"team{i}")
        pool.teams.add(team)
        Quota.objects.create(team=team, gpu_model=model, guaranteed=int(gpus_total * args.guaranteed) // args.teams,
                             limit=gpus_total)
        user = User.objects.create_user(username=f"user{i}", password=secrets.token_urlsafe(12))
        Membership.objects.create(user=user, team=team, role=Membership.MEMBER)
        teams.append(team)
        users.append(user)
        tokens.append(Token.objects.create(user=user).key)
    node_tokens = {}
    for i in range(args.nodes):
        node = Node.objects.create(name=f"load-{i:04d}", pool=pool, state=Node.DOWN)
        node_tokens[node.name] = NodeToken.issue(node)[1]
    now = db_now()
    for start in range(0, args.jobs, 2000):
        batch = Job.objects.bulk_create(
            Job(team=teams[i % len(teams)], submitted_by=users[i % len(users)], name=f"bulk-{i}", command="true",
                gpus=random.choice((1, 1, 1, 2, 4)), gpu_model=model, priority_class=pc, time_limit_minutes=60,
                pending_reason_code="Scheduling")
            for i in range(start, min(args.jobs, start + 2000))
        )
        JobTransition.objects.bulk_create(
            JobTransition(job=j, from_state="", to_state="pending", at=now, cause="submitted") for j in batch
        )
    return {"api_tokens": tokens, "node_tokens": node_tokens, "teams": [t.name for t in teams]}


def start_agent(name: str, token: str, base: str, logs: Path) -> subprocess.Popen:
    """A real node agent for node ``name`` (fake GPUs, 8 of them; the process executor runs the jobs' ``true``)."""
    token_file = logs / "agent.token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    work = logs / "agent"
    subprocess.run(["rm", "-rf", str(work)], check=False)  # a fresh database numbers its jobs from 1 again
    return subprocess.Popen(
        [sys.executable, "-m", "scheduler.agent", "--portal", base, "--token-file", str(token_file), "--gpu-backend",
         "fake", "--profile", "h100x8", "--hostname", name, "--executor", "process", "--work-dir", str(work),
         "--log-level", "WARNING"], cwd=ROOT, stdout=open(logs / "agent.log", "w"), stderr=subprocess.STDOUT,
        start_new_session=True)


# The issue's size, bounded: 10,000 pending, 500 nodes of 8 GPUs, 50 clients; the drain gives up after 15 min.
PRESETS = {"full": {"jobs": 10000, "nodes": 500, "clients": 50, "client_rate": 1.0, "drain_timeout": 900.0}}


# ------------------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2000, help="pending jobs queued before the run (issue: 10000)")
    parser.add_argument("--nodes", type=int, default=50, help="fake nodes (issue: 500)")
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--clients", type=int, default=10, help="concurrent API clients (issue: 50)")
    parser.add_argument("--requests", type=int, default=40, help="requests per client (half submit, half list)")
    parser.add_argument("--client-rate", type=float, default=0.0,
                        help="requests a second per client, open loop (0: closed loop, each client sends its next "
                             "request when the last is answered; full preset: 1)")
    parser.add_argument("--arrivals", choices=("poisson", "even"), default="poisson",
                        help="open loop: Poisson arrivals or evenly spaced")
    parser.add_argument("--teams", type=int, default=10)
    parser.add_argument("--guaranteed", type=float, default=0.0,
                        help="share of the GPUs guaranteed to the teams together (1.0: reclaim stress)")
    parser.add_argument("--no-long-poll", dest="long_poll", action="store_false",
                        help="fake nodes do not long-poll for news (POST /api/v1/node/wait/; the real agent does)")
    parser.add_argument("--interval", type=float, default=2.0,
                        help="heartbeat interval of each node until the portal names its own (it grows with the fleet)")
    parser.add_argument("--job-seconds", type=float, nargs=2, default=(0.5, 3.0), help="simulated run time range")
    parser.add_argument("--drain-timeout", type=float, default=420, help="give up draining after this many s")
    parser.add_argument("--node-procs", type=int, default=2,
                        help="processes the fake nodes are spread over (a thread per node, as each agent has)")
    parser.add_argument("--client-procs", type=int, default=2, help="processes the API clients are spread over")
    parser.add_argument("--no-agent", dest="agent", action="store_false",
                        help="no real node agent (by default one of the nodes is a real agent, fake GPUs and the "
                             "process executor, for its memory under the load)")
    parser.add_argument("--preset", choices=tuple(PRESETS), help="full: the issue's size (" +
                        ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in PRESETS["full"].items()) + ")")
    parser.add_argument("--server", choices=("gunicorn", "runserver"), default="gunicorn",
                        help="the portal as make serve runs it, or Django's development server to compare")
    parser.add_argument("--web-workers", type=int, help="gunicorn worker processes (default: make serve's)")
    parser.add_argument("--one-server", dest="node_server", action="store_false",
                        help="serve users and nodes from one server (make serve gives the nodes their own)")
    parser.add_argument("--node-workers", type=int, help="the nodes' server's workers (default: make serve's)")
    parser.add_argument("--node-nice", type=int, help="the nodes' server's nice value (default: make serve's)")
    parser.add_argument("--no-control", dest="control_server", action="store_false",
                        help="the nodes heartbeat at the nodes' server (make serve gives heartbeats a server of their "
                             "own)")
    parser.add_argument("--web-threads", type=int, help="threads per gunicorn worker (default: make serve's)")
    parser.add_argument("--database", default="rota_load")
    parser.add_argument("--redis-url", default=os.environ.get("ROTA_LOAD_REDIS_URL", DEFAULT_REDIS_URL),
                        help="the portal's Redis (default: $ROTA_LOAD_REDIS_URL or db 14)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--cycle-loop", action="store_true", help=argparse.SUPPRESS)
    preset = parser.parse_known_args()[0].preset
    parser.set_defaults(**PRESETS.get(preset, {}))  # the preset's sizes; a flag given beside it wins
    args = parser.parse_args()
    base_url = os.environ.get("ROTA_LOAD_DATABASE_URL", "postgres://postgres@localhost:5432")
    database_url = f"{base_url}/{args.database}"
    os.environ["ROTA_LOAD_REDIS_URL"] = args.redis_url  # (the cycle loop's process reads it from here too)
    os.environ.update(_env(database_url))
    if args.cycle_loop:
        cycle_loop()
        return 0

    random.seed(7)
    t0 = time.monotonic()
    setup_database(database_url, args.database)
    import django

    django.setup()
    seeded = seed(args)
    print(f"seeded {args.jobs} pending jobs, {args.nodes} nodes, {args.teams} teams in "
          f"{time.monotonic() - t0:.1f} s", flush=True)

    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    logs = Path(os.environ.get("ROTA_VAR_DIR", ROOT / "var")) / "load"
    logs.mkdir(parents=True, exist_ok=True)
    node_port = _free_port() if args.node_server and args.server == "gunicorn" else None
    node_base = f"http://127.0.0.1:{node_port}" if node_port else base
    control_port = _free_port() if node_port and args.control_server else None
    servers = [start_server(args, port, logs, node_port, control_port=control_port)]
    if node_port:
        servers.append(start_server(args, port, logs, node_port, role="nodes", control_port=control_port))
    if control_port:
        servers.append(start_server(args, port, logs, node_port, role="control", control_port=control_port))
    cycles = subprocess.Popen([sys.executable, __file__, "--cycle-loop", "--database", args.database], cwd=ROOT,
                              env=os.environ.copy(), stdout=subprocess.PIPE, stderr=open(logs / "cycle.log", "w"),
                              text=True, start_new_session=True)
    stats: dict[str, list] = defaultdict(list)
    cycle_ms: list[dict] = []
    threading.Thread(target=lambda: [cycle_ms.append(json.loads(line)) for line in cycles.stdout],
                     daemon=True).start()
    stop = threading.Event()
    nodes_span = [0.0, 0.0]  # when the nodes started and stopped (monotonic)
    agent = [None]  # the real node agent's process, once started
    peak: dict[str, float] = defaultdict(float)  # peak RSS (VmHWM), MiB, of each kind of process
    web_cpu: dict[int, float] = {}  # CPU seconds of each gunicorn worker
    roles: dict[int, str] = {}  # each worker's server: web (users), nodes or control
    web_cpu_at_start: dict[int, float] = {}

    def sample_memory():
        while not stop.is_set():
            current = {pid: role for role, server in zip(ROLES, servers, strict=False)
                       for pid in _children(server.pid)}
            roles.update(current)
            workers, masters = list(current), [s.pid for s in servers]
            for name, pids in (("web_worker", workers), ("web_master", masters), ("cycle", [cycles.pid]),
                               ("agent", [agent[0].pid] if agent[0] else [])):
                for pid in pids:
                    peak[name] = max(peak[name], _rss_mb(pid)["peak_rss_mb"])
            peak["web_workers"] = max(peak["web_workers"], len(workers))
            for pid in workers:  # the last reading of each worker: its CPU up to then
                web_cpu[pid] = _cpu_s(pid) or web_cpu.get(pid, 0.0)
            stop.wait(1)

    threading.Thread(target=sample_memory, daemon=True).start()
    traffic = Traffic(base, args, node_base)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                for url in {base, node_base, f"http://127.0.0.1:{control_port}" if control_port else base}:
                    requests.get(f"{url}/login/", timeout=2)
                break
            except requests.RequestException:
                if time.monotonic() > deadline:
                    raise SystemExit("the portal did not start; see var/load/server-*.log") from None
                time.sleep(0.3)
        from django.db.models import Max

        from scheduler.models import Job
        from scheduler.models.jobs import ACTIVE_STATES
        from scheduler.services.common import db_now

        nodes = list(seeded["node_tokens"].items())
        agent_node = nodes.pop() if args.agent else None
        traffic.prepare(nodes, seeded["api_tokens"])  # the load generator's interpreters, started and ready
        web_cpu_at_start.update({pid: _cpu_s(pid) or 0.0 for s in servers for pid in _children(s.pid)})  # imports done
        drain_started = time.monotonic()
        nodes_span[0] = drain_started
        started_at = db_now()
        if agent_node:
            agent[0] = start_agent(*agent_node, node_base, logs)
        traffic.go()
        client_s = traffic.run_clients(stats)
        submitted = len(stats["submit"])
        print(f"clients done in {client_s:.1f} s; draining", flush=True)
        drained = None
        while time.monotonic() - drain_started < args.drain_timeout:
            if not Job.objects.filter(state__in=ACTIVE_STATES).exists():
                drained = time.monotonic() - drain_started
                break
            time.sleep(1)
    finally:
        stop.set()
        nodes_span[1] = time.monotonic()
        traffic.stop(stats)
        for proc in [p for p in (agent[0], cycles, *servers) if p]:  # each leads its own process group
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(25)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)

    from django.db import connection

    from accounting.services import usage_rollup
    from scheduler.audit import audit

    connection.close()
    usage_rollup()
    findings = audit()
    last_end = Job.objects.aggregate(last=Max("finished_at"))["last"]
    states = dict(Job.objects.values_list("state").annotate(n=__import__("django").db.models.Count("id")))
    waits = {kind: len(stats[f"wait_{kind}"]) for kind in ("news", "delivered", "held", "refused")}
    served = (submitted + len(stats["list"]) + len(stats["heartbeat"]) + len(stats["event"])
              + waits["news"] + waits["held"] + waits["refused"])
    ran_cycles = [c["ms"] for c in cycle_ms if "ms" in c]
    cycle_cpu = [c["cpu_ms"] for c in cycle_ms if "cpu_ms" in c]
    node_seconds = max(1e-9, (nodes_span[1] - nodes_span[0]) * (args.nodes - args.agent))
    told = sorted(stats["interval_told"])  # the interval the portal last told each fake node
    api_requests = submitted + len(stats["list"])
    cycle_errors = [c["error"] for c in cycle_ms if "error" in c]
    run_cpu = {pid: cpu - web_cpu_at_start.get(pid, 0.0) for pid, cpu in web_cpu.items()}  # each worker's, in the run
    figures = {
        "server": args.server + {1: "", 2: " (users and nodes apart)", 3: " (users, nodes and their heartbeats apart)"}[
            len(servers)],
        "jobs": args.jobs, "nodes": args.nodes, "gpus": args.nodes * args.gpus_per_node, "clients": args.clients,
        "submit_per_s": round(submitted / client_s, 1) if client_s else None,
        "api_requests": api_requests,
        # closed loop: clients send back to back (saturation); open: each at --client-rate, latency from when due
        "client_mode": (f"open loop, {args.client_rate:g}/s per client ({args.arrivals})" if args.client_rate > 0
                        else "closed loop (no think time)"),
        "api_rate_per_s": {"offered": round(args.clients * args.client_rate, 1) if args.client_rate > 0 else None,
                           "achieved": round(api_requests / client_s, 1) if client_s else None},
        "submit_ms": {"p50": round(_pctl(stats["submit"], .5), 1), "p99": round(_pctl(stats["submit"], .99), 1)},
        "list_ms": {"p50": round(_pctl(stats["list"], .5), 1), "p99": round(_pctl(stats["list"], .99), 1)},
        # from the actual send, not from when due: what a closed-loop or coordinated-omission figure shows
        "api_service_ms": {kind: {"p50": round(_pctl(stats[f"{kind}_service"], .5), 1),
                                  "p99": round(_pctl(stats[f"{kind}_service"], .99), 1)}
                           for kind in ("submit", "list")},
        "heartbeat_interval_s": {"start": args.interval, "told_min": told[0] if told else None,
                                 "told_max": told[-1] if told else None,
                                 "timeout_s": max(stats["timeout_told"], default=None)},
        "heartbeat_ms": {"p50": round(_pctl(stats["heartbeat"], .5), 1),
                         "p99": round(_pctl(stats["heartbeat"], .99), 1), "count": len(stats["heartbeat"]),
                         # heartbeats per node per interval told: 1 at the interval, more when the long-poll
                         # brings news (and while a node still used the starting interval)
                         "per_node_interval": round(len(stats["heartbeat"]) * (told[-1] if told else args.interval)
                                                    / node_seconds, 2),
                         "per_s": round(len(stats["heartbeat"]) / max(1e-9, nodes_span[1] - nodes_span[0]), 1)},
        # one request carries all the events a fake node has at that moment (POST /api/v1/node/events/)
        "node_event_ms": {"p50": round(_pctl(stats["event"], .5), 1), "p99": round(_pctl(stats["event"], .99), 1),
                          "requests": len(stats["event"]), "events": sum(stats["events_sent"]),
                          # answered 429 at once (the bulk lane's queue was full): sent again after Retry-After
                          "busy_429": len(stats["event_busy"]),
                          "busy_429_p50_ms": round(_pctl(stats["event_busy"], .5), 1),
                          "busy_429_retry_after_s": {q: _pctl(stats["event_busy_retry_after"], p)
                                                     for q, p in (("p50", .5), ("p99", .99))}},
        "long_poll": waits if args.long_poll else None,
        "cycles": len(ran_cycles), "cycle_errors": cycle_errors[:5] + ([f"... {len(cycle_errors)} in all"]
                                                                      if len(cycle_errors) > 5 else []),
        "cycle_ms": {"first": round(ran_cycles[0], 1) if ran_cycles else None,
                     "p50": round(_pctl(ran_cycles, .5), 1), "max": round(max(ran_cycles, default=0), 1),
                     "mean": round(statistics.fmean(ran_cycles), 1) if ran_cycles else None,
                     "cpu_p50": round(_pctl(cycle_cpu, .5), 1)},
        "drain_s": round(drained, 1) if drained is not None else None,
        "memory_peak_mb": dict(peak),
        # the web tier's CPU per request served (API, heartbeats, node events): steadier than latency on a shared
        # machine, where other work decides how long a request waits for a core
        "web_cpu_ms_per_request": round(1000 * sum(run_cpu.values()) / max(1, served), 2),
        "web_cpu_s": round(sum(run_cpu.values()), 1),
        "web_cpu_s_by_server": {role: round(sum(cpu for pid, cpu in run_cpu.items() if roles[pid] == role), 1)
                                for role in set(roles.values())},
        # the traffic's own processes compete for the same cores as the portal
        "loadgen_cpu_s": round(sum(stats["loadgen_cpu_s"]), 1),
        "load_average": list(os.getloadavg()),
        # when the last job ended, from the start of the traffic (the drain's bound counts the clients' time too)
        "last_job_ended_s": round((last_end - started_at).total_seconds(), 1) if last_end else None,
        "api_errors": len(stats["api_errors"]), "node_errors": len(stats["node_errors"]),
        "node_error_kinds": Counter(e[:60] for e in stats["node_errors"]).most_common(3),
        "final_states": states, "audit_findings": findings,
        # nothing lost: every job queued or accepted is there, and every one ended as it should
        "lost": args.jobs + submitted - sum(states.values()),
        "not_succeeded": sum(n for state, n in states.items() if state != "succeeded"),
        "preemptions": preemption_figures(states.get("succeeded", 0)),
        # where in the run the slow answers were: per window of the run, from the actual send
        "timeline": timeline(stats, nodes_span[0], ("submit", "list", "heartbeat")),
    }
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        for key, value in figures.items():
            if key != "timeline":
                print(f"{key:>14}: {value}")
        print_timeline(figures["timeline"])
    return 1 if findings or drained is None or cycle_errors or figures["lost"] else 0


def timeline(stats: dict, start: float, kinds: tuple[str, ...], width_s: float = 10.0) -> list[dict]:
    """Each ``width_s`` window of the run (by when the answer came): for each kind of request, how many were
    answered in it and their p50 / p99 / max in ms."""
    windows: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for kind in kinds:
        for at, ms in stats[f"{kind}_timeline"]:
            windows[int((at - start) // width_s)][kind].append(ms)
    return [{"from_s": round(n * width_s), **{kind: {"n": len(ms), "p50": round(_pctl(ms, .5)),
                                                     "p99": round(_pctl(ms, .99)), "max": round(max(ms))}
                                              for kind, ms in windows[n].items()}}
            for n in sorted(windows)]


def print_timeline(rows: list[dict]) -> None:
    kinds = sorted({k for row in rows for k in row if k != "from_s"})
    print("      window " + "".join(f"{k + ' n / p50 / p99 / max, ms':>36}" for k in kinds))
    for row in rows:
        cells = (row.get(k) for k in kinds)
        text = ("{n} / {p50} / {p99} / {max}".format(**c) if c else "-" for c in cells)
        print(f"{row['from_s']:>9} s " + "".join(f"{t:>36}" for t in text))


def preemption_figures(finished: int) -> dict:
    """How often the run preempted (issue 21: reclaim that converges): in all, per finished job, and the most
    times one job was preempted."""
    from django.db.models import Count, Max

    from scheduler.models import Preemption

    per_job = Preemption.objects.values("job_id").annotate(n=Count("id"))
    total = sum(row["n"] for row in per_job)
    most = per_job.aggregate(most=Max("n"))["most"] or 0
    return {"total": total, "per_finished_job": round(total / finished, 3) if finished else None,
            "most_on_one_job": most}


if __name__ == "__main__":
    sys.exit(main())
