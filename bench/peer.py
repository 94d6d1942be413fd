"""Rota beside tuned Slurm on the same machine: ``python bench/peer.py [--json]`` (``make bench-peer``).

One after the other, each alone on the box:

- **Slurm** (``bench/peer_slurm.py``): a real Slurm 22.05 test cluster, one node × 8 stand-in GPUs, tuned for
  short jobs (``batch_sched_delay=0,sched_min_interval=0,bf_interval=1``), driven with ``sbatch``.
- **Rota** as ``make serve`` runs it (``scripts/serve.sh`` itself: gunicorn under production settings, a Celery
  worker and beat) on a database of its own (``rota_peer``, dropped and re-created) and Redis db 13, and one node
  agent with 8 fake GPUs and the process executor; jobs are submitted through the HTTP API with keep-alive.

Measured for both: (a) the drain of ``--drain-jobs`` trivial one-GPU jobs (``true``) submitted by 8 concurrent
clients, jobs/s from the first submit to the last end; (b) idle-cluster submit -> running p50/p99 over
``--idle-jobs`` jobs one at a time (Rota: again with the container executor, beside it); (c) ``--submits``
submits one after the other from one client, then from 8 concurrent clients: submits/s, p50/p99 latency.
Prints one table (both columns and Rota's advantage) and writes ``var/bench-peer.json``
``{"slurm": {...}, "rota": {...}}``. ``--only rota`` (or ``slurm``) keeps the other column from the last file.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from burst import burst  # noqa: E402
from latency import journey, seed  # noqa: E402
from load import _env, _free_port, _pctl, setup_database  # noqa: E402
from peer_cpu import children_named, cpu_by_group, delta  # noqa: E402

NODE = "peer-h100-01"
CONTAINER_IMAGE = "localhost/rota/busybox:1"
# (key, label, higher is better)
ROWS = (("drain_jobs_per_s", "drain, jobs/s", True),
        ("drain_backlog_jobs_per_s", "  once the submits returned, jobs/s", True),
        ("submit_to_running_p50_s", "idle submit -> running p50, s", False),
        ("submit_to_running_p99_s", "idle submit -> running p99, s", False),
        ("submit_to_running_container_p50_s", "  container executor p50, s", False),
        ("submit_to_running_container_p99_s", "  container executor p99, s", False),
        ("submit_per_s_1_client", "submits/s, 1 client", True),
        ("submit_per_s_8_clients", "submits/s, 8 clients", True),
        ("submit_p50_s", "submit p50, 1 client, s", False),
        ("submit_p99_s", "submit p99, 1 client, s", False),
        ("submit_p99_s_8_clients", "submit p99, 8 clients, s", False))


def burst_figures(elapsed: float, latencies: list[float], clients: int) -> dict:
    suffix = "1_client" if clients == 1 else f"{clients}_clients"
    figures = {f"submit_per_s_{suffix}": round(len(latencies) / elapsed, 1)}
    if clients == 1:
        figures.update(submit_p50_s=round(_pctl(latencies, .5), 4), submit_p99_s=round(_pctl(latencies, .99), 4))
    else:
        figures.update({f"submit_p50_s_{suffix}": round(_pctl(latencies, .5), 4),
                        f"submit_p99_s_{suffix}": round(_pctl(latencies, .99), 4)})
    return figures


def backlog_figures(backlog: int, seconds: float) -> dict:
    """The drain once every submit has returned: the jobs not finished then, and how fast they went."""
    return {"drain_backlog_jobs": backlog, "drain_backlog_jobs_per_s": round(backlog / seconds, 1)}


def run_slurm(args) -> dict:
    from peer_slurm import SlurmSide

    side = SlurmSide()
    try:
        figures: dict = {}
        idle = side.idle_starts(args.idle_jobs)
        figures.update(submit_to_running_p50_s=round(_pctl(idle, .5), 3),
                       submit_to_running_p99_s=round(_pctl(idle, .99), 3))
        for clients in (1, 8):
            figures.update(burst_figures(*side.submit_burst(clients, args.submits), clients))
        side.wait_empty(600)
        began = time.time()
        drain_jobs = len(side.submit_burst(8, args.drain_jobs)[1])
        submitted, backlog = time.time(), side.active()
        ended = side.wait_empty(1800)  # a box shared with other work drains far slower
        figures.update(drain_jobs=drain_jobs, drain_s=round(ended - began, 1),
                       drain_jobs_per_s=round(drain_jobs / (ended - began), 1),
                       **backlog_figures(backlog, ended - submitted))
        time.sleep(1)  # the completion log is written as jobs end; let the last lines land
        figures["final_states"] = side.completed()  # every job of the run, by its end state
        return figures
    finally:
        side.close()


class RotaSide:
    """``scripts/serve.sh`` (without the demo) on its own database and Redis db, plus one node agent."""

    def __init__(self, args) -> None:
        self.logs = Path(os.environ.get("ROTA_VAR_DIR", ROOT / "var")) / "peer"
        self.logs.mkdir(parents=True, exist_ok=True)
        base_url = os.environ.get("ROTA_LOAD_DATABASE_URL", "postgres://postgres@localhost:5432")
        database_url = f"{base_url}/{args.database}"
        self.database = args.database
        os.environ.update({**_env(database_url), "REDIS_URL": args.redis_url})
        setup_database(database_url, args.database)
        import redis

        redis.Redis.from_url(args.redis_url).flushdb()  # this benchmark's own db: no message of an earlier run
        import django

        django.setup()
        self.seeded = seed(NODE)
        self.token_file = self.logs / "node.token"
        self.token_file.write_text(self.seeded["node_token"])
        self.token_file.chmod(0o600)
        port, node_port = _free_port(), _free_port()
        self.base = f"http://127.0.0.1:{port}"
        self.root = Path(args.rota_root or ROOT).resolve()  # another checkout's make serve, to compare
        # the agent talks to the nodes' own server where that make serve starts one (users to ``base``)
        apart = "ROTA_NODE_BIND" in (self.root / "scripts" / "serve.sh").read_text()
        self.node_base = f"http://127.0.0.1:{node_port}" if apart else self.base
        # What make serve runs, with the process executor allowed (production refuses nodes that do not isolate).
        self.env = {**os.environ, "ROTA_BIND": f"127.0.0.1:{port}", "ROTA_NODE_BIND": f"127.0.0.1:{node_port}",
                    "ROTA_VAR_DIR": str(self.logs), "ROTA_STATIC_ROOT": str(self.logs / "static"),
                    "ROTA_SERVE_DEMO": "0", "ROTA_REQUIRE_ISOLATION": "0"}
        self.serve = self._start("serve", [str(self.root / "scripts" / "serve.sh")], cwd=self.root)
        self.agent: subprocess.Popen | None = None
        self.errors = 0  # submits answered 5xx (and tried again)

    def _start(self, name: str, argv: list[str], cwd: Path = ROOT) -> subprocess.Popen:
        return subprocess.Popen(argv, cwd=cwd, env=self.env, stdout=open(self.logs / f"{name}.log", "w"),
                                stderr=subprocess.STDOUT, start_new_session=True)

    @staticmethod
    def _stop(proc: subprocess.Popen | None) -> None:
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)

    def start_agent(self, executor: str) -> None:
        """(Re)start the node agent with ``executor`` and wait until the portal has it ready."""
        from scheduler.models import Node

        self._stop(self.agent)
        deadline = time.monotonic() + 180
        while True:  # serve.sh migrates and collects static files first: start the agent once the web answers
            try:
                for url in {self.base, self.node_base}:
                    requests.get(f"{url}/api/v1/", timeout=5)
                break
            except requests.RequestException:
                if time.monotonic() > deadline or self.serve.poll() is not None:
                    raise SystemExit(f"the portal did not come up; see {self.logs}") from None
                time.sleep(0.5)
        work_dir = self.logs / f"agent-{executor}"
        shutil.rmtree(work_dir, ignore_errors=True)  # a fresh database numbers its jobs from 1 again
        self.agent = self._start(f"agent-{executor}", [
            sys.executable, "-m", "scheduler.agent", "--portal", self.node_base, "--token-file", str(self.token_file),
            "--gpu-backend", "fake", "--profile", "h100x8", "--hostname", NODE, "--executor", executor,
            "--work-dir", str(work_dir), "--log-level", "WARNING"], cwd=self.root)  # the agent of --rota-root too
        deadline = time.monotonic() + 120
        while not Node.objects.filter(name=NODE, state=Node.READY, executor=executor).exists():
            if time.monotonic() > deadline or self.serve.poll() is not None or self.agent.poll() is not None:
                raise SystemExit(f"the node agent ({executor}) did not register; see {self.logs}")
            time.sleep(0.2)
        time.sleep(3)  # let every process finish starting (first heartbeats, worker ready)

    def cpu(self) -> dict[str, float]:
        """CPU seconds so far of the web (users' server, the nodes' and their heartbeats'), Celery (worker and
        beat), the agent (with its jobs) and PostgreSQL."""
        parts = children_named(self.serve.pid, {"gunicorn_nodes": "nodes", "gunicorn_control": "control",
                                                "gunicorn": "web", " worker": "worker", " beat": "beat"})
        return cpu_by_group({**parts, "agent": self.agent.pid}, self.database)

    def close(self) -> None:
        self._stop(self.agent)
        self._stop(self.serve)

    def session(self) -> requests.Session:
        session = requests.Session()
        session.headers["Authorization"] = f"Token {self.seeded['api_token']}"
        return session

    def submit(self, session: requests.Session, name: str, image: str = "") -> int:
        """One submit; a 5xx (the shared PostgreSQL out of connections, say) is counted and tried again."""
        body = {"name": name, "command": "true", "gpus": 1, "gpu_model": "h100-80gb"}
        for _ in range(5):
            answer = session.post(f"{self.base}/api/v1/jobs/",
                                  json={**body, **({"image": image} if image else {})}, timeout=30)
            if answer.status_code < 500:
                break
            self.errors += 1
            time.sleep(0.5)
        answer.raise_for_status()
        return answer.json()["id"]

    def idle_starts(self, jobs: int, image: str = "") -> tuple[list[float], dict[str, list[float]]]:
        """Seconds from the client's submit to the job's ``running`` transition (PostgreSQL's clock, the same
        host), one job at a time on an idle cluster; and the legs of each journey."""
        from scheduler.models import Job, JobTransition

        session, seconds, legs = self.session(), [], {}
        for n in range(jobs):
            began = time.time()
            job_id = self.submit(session, f"idle-{n}", image)
            deadline = time.monotonic() + 60
            while Job.objects.filter(pk=job_id).values_list("state", flat=True).first() != "succeeded":
                if time.monotonic() > deadline:
                    raise SystemExit(f"job {job_id} did not succeed in 60 s; see {self.logs}")
                time.sleep(0.02)
            running = JobTransition.objects.filter(job_id=job_id, to_state="running").values_list("at", flat=True)
            seconds.append(running[0].timestamp() - began)
            for leg, value in journey(job_id).items():
                legs.setdefault(leg, []).append(value)
            time.sleep(0.5)
        return seconds, legs

    def submit_burst(self, clients: int, total: int) -> tuple[float, list[float]]:
        def client(c: int):
            session = self.session()
            return lambda i: self.submit(session, f"burst-{c}-{i}")

        return burst(clients, total, client)

    def cycles(self, first_id: int) -> int:
        """How many cycles admitted the jobs from ``first_id`` on (a cycle stamps its admissions with its time)."""
        from scheduler.models import JobTransition

        return JobTransition.objects.filter(job_id__gte=first_id, to_state="admitted").values("at").distinct().count()

    def active(self, first_id: int) -> int:
        """How many jobs from ``first_id`` on have not finished yet."""
        from scheduler.models import Job
        from scheduler.models.jobs import ACTIVE_STATES

        return Job.objects.filter(pk__gte=first_id, state__in=ACTIVE_STATES).count()

    def wait_drained(self, first_id: int, timeout_s: float) -> dict:
        from django.db.models import Count, Max

        from scheduler.models import Job
        from scheduler.models.jobs import ACTIVE_STATES

        jobs = Job.objects.filter(pk__gte=first_id)
        deadline = time.monotonic() + timeout_s
        while jobs.filter(state__in=ACTIVE_STATES).exists():
            if time.monotonic() > deadline:
                raise SystemExit(f"Rota did not drain in {timeout_s:g} s; see {self.logs}")
            time.sleep(0.2)
        return {"last_end": jobs.aggregate(last=Max("finished_at"))["last"].timestamp(),
                "states": dict(jobs.values_list("state").annotate(n=Count("id")).values_list("state", "n"))}


def run_rota(args) -> dict:
    side = RotaSide(args)
    from scheduler.models import Job

    try:
        side.start_agent("process")
        figures: dict = {}
        if args.submits_only:
            return rota_submits(side, args)
        idle, legs = side.idle_starts(args.idle_jobs)
        figures.update(submit_to_running_p50_s=round(_pctl(idle, .5), 3),
                       submit_to_running_p99_s=round(_pctl(idle, .99), 3),
                       legs={f"{leg}_p50_p99_s": [round(_pctl(v, .5), 3), round(_pctl(v, .99), 3)]
                             for leg, v in legs.items()})
        first = Job.objects.order_by("-id").values_list("id", flat=True).first() + 1
        for clients in (1, 8):
            figures.update(burst_figures(*side.submit_burst(clients, args.submits), clients))
        side.wait_drained(first, 600)
        first = Job.objects.order_by("-id").values_list("id", flat=True).first() + 1
        cpu_before = side.cpu()
        began = time.time()
        drain_jobs = len(side.submit_burst(8, args.drain_jobs)[1])
        submitted, backlog = time.time(), side.active(first)
        drained = side.wait_drained(first, 1800)  # a box shared with other work drains far slower
        cpu = delta(cpu_before, side.cpu())
        figures["drain_cpu_s"] = cpu
        figures["drain_cpu_ms_per_job"] = round(sum(v for k, v in cpu.items() if "(" not in k) * 1000
                                                / drain_jobs, 1)
        seconds = drained["last_end"] - began
        figures["drain_cycles"] = side.cycles(first)  # that admitted them
        figures.update(drain_jobs=drain_jobs, drain_s=round(seconds, 1),
                       drain_jobs_per_s=round(drain_jobs / seconds, 1), drain_states=drained["states"],
                       **backlog_figures(backlog, drained["last_end"] - submitted))
        figures["submit_errors_5xx"] = side.errors
        if not args.no_container:
            side.start_agent("container")
            idle, _legs = side.idle_starts(args.idle_jobs, CONTAINER_IMAGE)
            figures.update(submit_to_running_container_p50_s=round(_pctl(idle, .5), 3),
                           submit_to_running_container_p99_s=round(_pctl(idle, .99), 3))
        return figures
    finally:
        side.close()


def rota_submits(side: RotaSide, args) -> dict:
    """(c) alone (``--submits-only``), with what the submits cost each process in CPU (the node agent runs the
    jobs meanwhile, as in the whole run: its heartbeats and events are in the web's share), the clients' own
    (this process's threads) included."""
    figures: dict = {}
    for clients in (1, 8):
        cpu_before, own_before = side.cpu(), time.process_time()
        figures.update(burst_figures(*side.submit_burst(clients, args.submits), clients))
        cpu = {**delta(cpu_before, side.cpu()), "clients": time.process_time() - own_before}
        figures[f"submit_cpu_ms_per_submit_{clients}"] = {k: round(v * 1000 / args.submits, 2) for k, v in cpu.items()}
    figures["submit_errors_5xx"] = side.errors
    return figures


def table(results: dict) -> str:
    slurm, rota = results.get("slurm", {}), results.get("rota", {})
    lines = [f"{'':34} {'Slurm (tuned)':>14} {'Rota':>10} {'Rota advantage':>15}"]
    for key, label, higher in ROWS:
        s, r = slurm.get(key), rota.get(key)
        if s is None and r is None:
            continue
        ratio = "" if not (s and r) else f"{(r / s if higher else s / r):.2f}x"
        lines.append(f"{label:34} {'-' if s is None else s:>14} {'-' if r is None else r:>10} {ratio:>15}")
    lines.append("advantage > 1: Rota better (rates: Rota / Slurm; times: Slurm / Rota)")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--drain-jobs", type=int, default=2000)
    parser.add_argument("--idle-jobs", type=int, default=20)
    parser.add_argument("--submits", type=int, default=200, help="submits from 1 client, then from 8 clients")
    parser.add_argument("--only", choices=["slurm", "rota"], help="run one side, keep the other from the file")
    parser.add_argument("--no-container", action="store_true", help="skip Rota's container-executor figure")
    parser.add_argument("--submits-only", action="store_true",
                        help="Rota: only the submits from 1 and 8 clients (c), with their CPU per submit")
    parser.add_argument("--rota-root", type=Path, help="serve Rota from this checkout (a before/after comparison)")
    parser.add_argument("--database", default="rota_peer")
    parser.add_argument("--redis-url", default=os.environ.get("ROTA_PEER_REDIS_URL", "redis://localhost:6379/13"))
    parser.add_argument("--output", type=Path, default=ROOT / "var" / "bench-peer.json")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results: dict = {}
    if args.only and args.output.exists():
        results = json.loads(args.output.read_text())
    began = time.monotonic()
    for name, run in (("slurm", run_slurm), ("rota", run_rota)):
        if args.only in (None, name):
            side_began = time.monotonic()
            results[name] = run(args)
            results[name]["wall_s"] = round(time.monotonic() - side_began, 1)
            print(f"[peer] {name} done in {results[name]['wall_s']} s", file=sys.stderr)
    results["wall_s"] = round(time.monotonic() - began, 1)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2) if args.json else table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
