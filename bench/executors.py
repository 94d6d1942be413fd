"""Submit -> running on an idle cluster, container executor beside process executor, in the same run:

    sudo .venv/bin/python bench/executors.py [--jobs 20] [--interval 2] [--json]

On a database of its own (``rota_bench_executors``, dropped and re-created; never the dev or test one) it
loads the demo (``seed_demo``), starts what ``make dev`` starts -- the portal (``runserver``), a Celery
worker and beat -- and two real node agents with the dev heartbeat interval: gpu-h100-01 with
``--executor container`` (Podman; the agent must be root) and gpu-h100-02 with ``--executor process``.
alice then submits ``--jobs`` one-GPU jobs to each node in turn (``node_labels`` pick the node), one at a
time on the idle cluster, each after the last ended and a random pause (0 to one heartbeat interval).

Submit -> running is the job's ``running`` transition minus its ``created_at`` (both stamped by the
portal). Prints p50/p90/p99/max per executor and the p50 of each step: -> admitted (the Celery wake-up
and cycle), -> starting (the assignment reaching the agent on its next heartbeat), -> running (the
executor's start; for a container, ``podman run``). Exit 1 if a job did not succeed or the auditor finds
anything. Redis: ``ROTA_BENCH_REDIS_URL`` (default db 14); PostgreSQL: ``ROTA_BENCH_DATABASE_URL``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.load import _env, _free_port, setup_database  # noqa: E402

NODES = {"container": "gpu-h100-01", "process": "gpu-h100-02"}


def start(cmd: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(cmd, cwd=ROOT, env=os.environ.copy(), stdout=open(log, "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()


def wait_until(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise SystemExit(f"timed out after {timeout}s waiting for {what}")


def pct(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20, help="jobs per executor")
    parser.add_argument("--interval", type=int, default=2, help="agent heartbeat seconds (make dev: 2)")
    parser.add_argument("--database", default="rota_bench_executors")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench/executors.py: the container executor runs jobs as the teams' uids: run it as root")
    database_url = f"{os.environ.get('ROTA_BENCH_DATABASE_URL', 'postgres://postgres@localhost:5432')}/{args.database}"
    os.environ.update(_env(database_url))
    os.environ["REDIS_URL"] = os.environ.get("ROTA_BENCH_REDIS_URL", "redis://localhost:6379/14")
    os.environ["ROTA_NODE_HEARTBEAT_INTERVAL_S"] = str(args.interval)
    subprocess.run([str(ROOT / "scripts" / "build-images.sh")], check=True, stdout=subprocess.DEVNULL)
    setup_database(database_url, args.database)
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from rest_framework.authtoken.models import Token

    from scheduler.audit import audit
    from scheduler.models import Job, Node

    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    work = Path(tempfile.mkdtemp(prefix="rota-bench-executors-"))
    call_command("migrate", verbosity=0)
    call_command("seed_demo", agents_dir=str(work), portal=base, stdout=open(os.devnull, "w"))
    for executor, node in NODES.items():
        Node.objects.filter(name=node).update(labels={"bench": executor})
    token = Token.objects.get_or_create(user=get_user_model().objects.get(username="alice"))[0].key
    py = sys.executable
    procs = [
        start([py, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"], work / "web.log"),
        start([py, "-m", "celery", "-A", "portal", "worker", "--pool=solo", "--without-gossip", "--without-mingle"],
              work / "worker.log"),
        start([py, "-m", "celery", "-A", "portal", "beat", "--schedule", str(work / "beat-schedule")],
              work / "beat.log"),
    ]
    for executor, node in NODES.items():
        procs.append(start([py, "-m", "scheduler.agent", "--portal", base, "--token-file", str(work / f"{node}.token"),
                            "--gpu-backend", "fake", "--profile", str(work / f"{node}.json"),
                            "--work-dir", str(work / node), "--interval", str(args.interval),
                            "--executor", executor], work / f"agent-{node}.log"))
    session = requests.Session()
    session.headers["Authorization"] = f"Token {token}"
    failures, seconds = [], {executor: [] for executor in NODES}
    phases = {executor: {"admitted": [], "starting": [], "running": []} for executor in NODES}
    try:
        wait_until(lambda: Node.objects.filter(name__in=NODES.values(), registered_at__isnull=False).count() == 2,
                   60, "both agents to register")
        for i in range(args.jobs):
            for executor in NODES:
                # A user submits at any moment, not just after the agent's last heartbeat (when the previous
                # job's end was reported): without this pause every wait would be nearly a whole interval.
                time.sleep(random.uniform(0, args.interval))
                answer = session.post(f"{base}/api/v1/jobs/", json={
                    "name": f"bench-{executor}-{i}", "gpu_model": "h100-80gb", "gpus": 1, "command": "echo up",
                    "node_labels": {"bench": executor}, "priority_class": "interactive"}, timeout=30)
                answer.raise_for_status()
                job_id = answer.json()["id"]
                wait_until(lambda job_id=job_id: Job.objects.filter(pk=job_id, finished_at__isnull=False).exists(), 60,
                           f"job {job_id} to end")
                job = Job.objects.get(pk=job_id)
                if job.state != "succeeded":
                    failures.append(f"job {job_id} ({executor}) {job.state} {job.failure_reason}")
                at = dict(job.transitions.values_list("to_state", "at"))
                seconds[executor].append((at["running"] - job.created_at).total_seconds())
                previous = job.created_at
                for phase, values in phases[executor].items():  # where the time goes: cycle, heartbeat, start
                    values.append((at[phase] - previous).total_seconds())
                    previous = at[phase]
        findings = audit()
    finally:
        for proc in reversed(procs):
            stop(proc)
    results = {executor: {"jobs": len(values), "p50_s": round(statistics.median(values), 3),
                          "p90_s": round(pct(values, 90), 3), "p99_s": round(pct(values, 99), 3),
                          "max_s": round(max(values), 3),
                          **{f"to_{phase}_p50_s": round(statistics.median(spans), 3)
                             for phase, spans in phases[executor].items()}}
               for executor, values in seconds.items()}
    if args.json:
        print(json.dumps({"results": results, "failures": failures, "audit": findings}))
    else:
        print(f"submit -> running, idle cluster, agent heartbeat {args.interval} s, {args.jobs} jobs each:")
        for executor, figures in results.items():
            print(f"  {executor:9} " + "  ".join(f"{key} {value}" for key, value in figures.items()))
        for line in failures + findings:
            print("  !", line)
    return 1 if failures or findings else 0


if __name__ == "__main__":
    sys.exit(main())
