"""Submit -> running on an idle cluster: ``python bench/latency.py [--jobs 20] [--json]`` (``make latency``).

On a database of its own (``rota_latency``, dropped and re-created) it starts what ``make serve`` starts, on
loopback: gunicorn under production settings, a Celery worker and beat, and one node agent (fake backend, 8
GPUs, the process executor). Then one API client submits trivial one-GPU jobs (``true``) one at a time, each
on an idle cluster (the previous one finished), and the job's journey is read from its transitions (stamped
by PostgreSQL's clock): submit -> admitted (the woken cycle), admitted -> starting (the node heard and took
it), starting -> running (the agent started the process and said so), running -> finished (the exit reached
the portal). It prints p50/p99 of each leg and of submit -> running, beside tuned Slurm's figure on this
machine kind (/work/shared/slurm-notes.md: p50 0.26-0.52 s, p99 0.6-1.1 s). Then ``--submits`` jobs are
submitted back to back from one client, and again from 8 concurrent clients: submits/s and p50/p99 latency
(Slurm's ``sbatch`` loop: 180-245/s). Those jobs run too: the node drains them, and the end-to-end rate from
the first of them submitted to the last finished is printed (tuned Slurm drains 11.5-13 trivial jobs/s on 8
GPUs).

``--executor slurm`` runs the same jobs through the Slurm bridge instead of the node agent: a real Slurm 22.05
test cluster (``scheduler/slurm/localcluster.py``: munged, slurmctld, slurmd with 8 stand-in GPUs, run as root) and
``python -m scheduler.slurm run`` polling every ``--bridge-interval`` s; each job runs as the team's uid
(a user ``rota-test-<uid>`` is added to the host for the run and removed after); with ``--containers`` each job
runs in the default image (podman under Slurm, ``docs/slurm.md``).

``--no-long-poll`` makes the portal refuse node long-polls (``ROTA_NODE_WAITERS_PER_PROCESS=0``), so the agent
hears of its work at its next heartbeat as before the long-poll existed: the figure to compare with.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from burst import burst as run_burst  # noqa: E402
from load import _env, _free_port, _pctl, setup_database  # noqa: E402

LEGS = (("submit_to_admitted", "pending", "admitted"), ("admitted_to_starting", "admitted", "starting"),
        ("starting_to_running", "starting", "running"), ("submit_to_running", "pending", "running"),
        ("running_to_finished", "running", "succeeded"))
SLURM_TUNED = {"submit_to_running_p50_s": (0.26, 0.52), "submit_to_running_p99_s": (0.6, 1.1)}


def seed(node_name: str) -> dict:
    """One team with a user (API token), a pool, an h100 quota and one node with its token."""
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from rest_framework.authtoken.models import Token

    from portal.models import Membership, Team
    from scheduler.models import GpuModel, Node, NodeToken, Pool, PriorityClass, Quota

    call_command("migrate", verbosity=0)
    model = GpuModel.objects.create(name="h100-80gb", memory_mb=81559)
    pool = Pool.objects.create(name="bench")
    PriorityClass.objects.create(name="training", value=500, preemptible=True, grace_period_s=1)
    team = Team.objects.create(name="bench")
    pool.teams.add(team)
    Quota.objects.create(team=team, gpu_model=model, guaranteed=0, limit=8)
    user = get_user_model().objects.create_user(username="bench", password=secrets.token_urlsafe(12))
    Membership.objects.create(user=user, team=team, role=Membership.MEMBER)
    node = Node.objects.create(name=node_name, pool=pool, state=Node.DOWN)
    return {"api_token": Token.objects.create(user=user).key, "node_token": NodeToken.issue(node)[1]}


def start(processes: list, name: str, command: list[str], env: dict, logs: Path) -> None:
    processes.append(subprocess.Popen(command, cwd=ROOT, env=env, stdout=open(logs / f"{name}.log", "w"),
                                      stderr=subprocess.STDOUT, start_new_session=True))


def journey(job_id: int) -> dict[str, float]:
    """Seconds between the job's transitions, by leg."""
    from scheduler.models import JobTransition

    at = {state: when for state, when in
          JobTransition.objects.filter(job_id=job_id).order_by("id").values_list("to_state", "at")}
    return {leg: (at[to] - at[frm]).total_seconds() for leg, frm, to in LEGS if frm in at and to in at}


def submit_burst(base: str, token: str, clients: int, total: int) -> dict:
    """``total`` submits from ``clients`` concurrent clients, each one after the other: rate and latency."""

    def client(_c: int):
        session = requests.Session()
        session.headers["Authorization"] = f"Token {token}"

        def submit(i: int) -> None:
            session.post(f"{base}/api/v1/jobs/", json={"name": f"burst-{i}", "command": "true", "gpus": 1,
                                                       "gpu_model": "h100-80gb"}, timeout=30).raise_for_status()
        return submit

    elapsed, seconds = run_burst(clients, total, client)
    latencies = [s * 1000 for s in seconds]
    return {"submits": len(latencies), "per_s": round(len(latencies) / elapsed, 1),
            "p50_ms": round(_pctl(latencies, .5), 1), "p99_ms": round(_pctl(latencies, .99), 1)}


def drain(first_id: int, logs: Path, timeout_s: float = 300) -> dict:
    """Wait until every job from ``first_id`` on has finished; end-to-end jobs/s from the first submit to
    the last end (PostgreSQL's stamps)."""
    from django.db.models import Max, Min

    from scheduler.models import Job
    from scheduler.models.jobs import ACTIVE_STATES

    burst = Job.objects.filter(pk__gte=first_id)
    deadline = time.monotonic() + timeout_s
    while burst.filter(state__in=ACTIVE_STATES).exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"the submitted jobs did not drain in {timeout_s:g} s; see {logs}")
        time.sleep(0.2)
    span = burst.aggregate(first=Min("created_at"), last=Max("finished_at"))
    seconds = (span["last"] - span["first"]).total_seconds()
    done = burst.filter(state="succeeded").count()
    return {"jobs": burst.count(), "succeeded": done, "seconds": round(seconds, 1),
            "jobs_per_s": round(done / seconds, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--submits", type=int, default=400,
                        help="then this many submits from 1 client, and again from 8 (0: skip)")
    parser.add_argument("--no-long-poll", action="store_true", help="nodes hear of work at their heartbeat only")
    parser.add_argument("--executor", choices=["agent", "slurm"], default="agent",
                        help="the node side: one node agent (default) or the Slurm bridge over a test cluster")
    parser.add_argument("--bridge-interval", type=float, default=2.0, help="the Slurm bridge's poll interval, s")
    parser.add_argument("--containers", action="store_true",
                        help="with --executor slurm: each job in its image (the bridge's --containers)")
    parser.add_argument("--database", default="rota_latency")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--web", choices=["asgi", "wsgi"], default="asgi",
                        help="gunicorn with uvicorn workers (make serve, deploy/gunicorn_asgi.conf.py) or gthread WSGI")
    args = parser.parse_args()
    base_url = os.environ.get("ROTA_LOAD_DATABASE_URL", "postgres://postgres@localhost:5432")
    database_url = f"{base_url}/{args.database}"
    os.environ.update(_env(database_url))
    setup_database(database_url, args.database)
    import django

    django.setup()
    slurm = args.executor == "slurm"
    node_name = "slurm-gpu-01" if slurm else "bench-h100-01"
    seeded = seed(node_name)

    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    logs = Path(os.environ.get("ROTA_VAR_DIR", ROOT / "var")) / "latency"
    logs.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(logs / "agent", ignore_errors=True)  # a fresh database numbers its jobs from 1 again
    token_file = logs / "node.token"
    token_file.write_text(seeded["node_token"])
    token_file.chmod(0o600)
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings_production", "SECURE_SSL_REDIRECT": "0",
           "ROTA_BIND": f"127.0.0.1:{port}", "ROTA_STATIC_ROOT": str(logs / "static")}
    if args.no_long_poll:
        env["ROTA_NODE_WAITERS_PER_PROCESS"] = "0"
    processes: list[subprocess.Popen] = []
    with ExitStack() as stack:

        def node_side() -> None:
            if slurm:
                start_slurm(stack, processes, seeded, base, env, logs, args.bridge_interval, args.containers)
            else:
                start(processes, "agent", [sys.executable, "-m", "scheduler.agent", "--portal", base,
                                           "--token-file", str(token_file), "--gpu-backend", "fake", "--profile",
                                           "h100x8", "--hostname", node_name, "--work-dir", str(logs / "agent"),
                                           "--log-level", "WARNING"], env, logs)

        legs, throughput = measure(args, processes, node_side, seeded, base, env, logs, node_name)
    figures = {"jobs": args.jobs, "executor": args.executor, "long_poll": not args.no_long_poll, "web": args.web,
               **({"bridge_interval_s": args.bridge_interval, "containers": args.containers} if slurm else {}),
               **{f"{leg}_p50_s": round(_pctl(v, .5), 3) for leg, v in legs.items()},
               **{f"{leg}_p99_s": round(_pctl(v, .99), 3) for leg, v in legs.items()},
               "submit_throughput": throughput, "slurm_tuned_reference": SLURM_TUNED}
    report(args, figures, throughput)
    return 0


def start_slurm(stack: ExitStack, processes: list, seeded: dict, base: str, env: dict, logs: Path,
                interval_s: float, containers: bool = False) -> None:
    """A Slurm test cluster, the team's user on the host, and the Slurm bridge speaking for its node (with
    ``containers``: each job in its image, the cluster running the bridge's epilog)."""
    from portal.models import Team
    from scheduler.slurm.containers import EPILOG
    from scheduler.slurm.localcluster import SlurmCluster
    from tests.slurm.users import unix_users

    root = Path(tempfile.mkdtemp(prefix="rota-bench-slurm-"))
    root.chmod(0o711)  # the team's uid reaches its batch script and output file through it
    stack.callback(shutil.rmtree, root, ignore_errors=True)
    stack.enter_context(unix_users(list(Team.objects.values_list("unix_id", flat=True))))
    cluster = SlurmCluster(root / "cluster", epilog=EPILOG if containers else None)
    stack.callback(cluster.stop)  # before the users go
    cluster.start()
    tokens, output = root / "tokens", root / "output"
    tokens.mkdir(mode=0o700)
    output.mkdir(mode=0o711)
    output.chmod(0o711)
    (tokens / f"{cluster.node}.token").write_text(seeded["node_token"])
    (tokens / f"{cluster.node}.token").chmod(0o600)
    start(processes, "bridge", [sys.executable, "-m", "scheduler.slurm", "run", "--portal", base, "--token-dir",
                                str(tokens), "--gpu-model", "h100=h100-80gb:81559", "--output-dir", str(output),
                                "--slurm-conf", str(cluster.conf), "--interval", str(interval_s),
                                "--log-level", "WARNING",
                                *(["--containers", "--gpu-devices", str(cluster.root / "dev")] if containers else [])],
          env, logs)


def measure(args, processes: list, node_side, seeded: dict, base: str, env: dict, logs: Path, node_name: str):
    """Start the portal's processes and then the node side (``node_side()``); the legs of ``--jobs`` jobs one
    at a time on an idle cluster, then the submit bursts."""
    bin_dir = Path(sys.executable).parent
    try:
        conf = "deploy/gunicorn_asgi.conf.py" if args.web == "asgi" else "deploy/gunicorn.conf.py"
        start(processes, "web", [str(bin_dir / "gunicorn"), "-c", conf], env, logs)
        start(processes, "worker", [str(bin_dir / "celery"), "-A", "portal", "worker", "--loglevel=WARNING",
                                    "--without-gossip", "--without-mingle"], env, logs)
        start(processes, "beat", [str(bin_dir / "celery"), "-A", "portal", "beat", "--loglevel=WARNING",
                                  f"--schedule={logs / 'celerybeat-schedule'}"], env, logs)
        node_side()
        from scheduler.models import Job, Node

        deadline = time.monotonic() + 90
        while not Node.objects.filter(name=node_name, state=Node.READY).exists():
            if time.monotonic() > deadline:
                raise SystemExit(f"the node agent did not register; see {logs}")
            time.sleep(0.2)
        session = requests.Session()
        session.headers["Authorization"] = f"Token {seeded['api_token']}"
        time.sleep(3)  # let every process finish starting (first heartbeats, worker ready)
        legs: dict[str, list[float]] = {leg: [] for leg, _frm, _to in LEGS}
        for n in range(args.jobs):
            answer = session.post(f"{base}/api/v1/jobs/", json={"name": f"lat-{n}", "command": "true", "gpus": 1,
                                                                "gpu_model": "h100-80gb"}, timeout=30)
            answer.raise_for_status()
            job_id = answer.json()["id"]
            deadline = time.monotonic() + 60
            while Job.objects.filter(pk=job_id).values_list("state", flat=True).first() != "succeeded":
                if time.monotonic() > deadline:
                    raise SystemExit(f"job {job_id} did not succeed in 60 s; see {logs}")
                time.sleep(0.05)
            for leg, seconds in journey(job_id).items():
                legs[leg].append(seconds)
            time.sleep(0.5)  # an idle cluster again, and the next submit lands anywhere in the heartbeat cycle
        throughput = {}
        if args.submits:
            first = Job.objects.order_by("-id").values_list("id", flat=True).first() + 1
            throughput["1_client"] = submit_burst(base, seeded["api_token"], 1, args.submits)
            throughput["8_clients"] = submit_burst(base, seeded["api_token"], 8, args.submits)
            throughput["drain"] = drain(first, logs)
    finally:
        for proc in reversed(processes):
            os.killpg(proc.pid, signal.SIGTERM)
        for proc in processes:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
    return legs, throughput


def report(args, figures: dict, throughput: dict) -> None:
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        print(f"node side: {figures['executor']}")
        print(f"{'leg':<22} {'p50 s':>7} {'p99 s':>7}")
        for leg, _frm, _to in LEGS:
            print(f"{leg:<22} {figures[leg + '_p50_s']:>7} {figures[leg + '_p99_s']:>7}")
        print("tuned Slurm, this machine kind: submit -> RUNNING p50 0.26-0.52 s, p99 0.6-1.1 s")
        if throughput:
            for name in ("1_client", "8_clients"):
                row = throughput[name]
                print(f"submits, {name.replace('_', ' ')}: {row['per_s']}/s, "
                      f"p50 {row['p50_ms']} ms, p99 {row['p99_ms']} ms")
            print("tuned Slurm, this machine kind: an sbatch loop, 180-245 submissions/s")
            row = throughput["drain"]
            print(f"drain: {row['succeeded']} of {row['jobs']} jobs succeeded, {row['jobs_per_s']} jobs/s "
                  f"from the first submit to the last end (tuned Slurm, 8 GPUs: 11.5-13 jobs/s)")


if __name__ == "__main__":
    sys.exit(main())
