"""What the node long-poll (``POST /api/v1/node/wait/``) costs the portal (issue 24): gunicorn as ``make serve``
runs it (``deploy/gunicorn_asgi.conf.py``, production settings), one web process of ``--threads`` threads, the
code of ``--root`` (a checkout: compare two), on its own database and Redis DB. Two phases:

- ``empty``: ``--clients`` nodes ask ``timeout_s: 0`` back to back: web CPU per answer.
- ``held``: ``--nodes`` nodes each long-poll ``--hold-s`` at a time (heartbeat interval 30 s, so never cut
  short); a node told ``waited: false`` waits out the rest of ``--hold-s`` (as the agent polls at its
  interval): held and refused waits, web CPU per held wait and per second.
- ``held, a user listing``: the same while a user lists jobs every 0.25 s: the list's latency.

``.venv/bin/python bench/longpoll.py --database rota_bench_me --redis redis://localhost:6379/13 [--root DIR]``
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
TICK = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    """CPU seconds of ``pid`` and its descendants (gunicorn's master and its worker)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    children = [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    return (int(fields[11]) + int(fields[12])) / TICK + sum(_cpu_s(child) for child in children)


def _fixtures(database: str, redis_url: str, nodes: int) -> tuple[list[str], str]:
    """Node tokens and a user's API token in the bench database (migrated here)."""
    os.environ.update(DJANGO_SETTINGS_MODULE="portal.settings", REDIS_URL=redis_url,
                      DATABASE_URL=f"postgres://postgres@localhost:5432/{database}")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from rest_framework.authtoken.models import Token

    from scheduler.models import Node, NodeToken, Pool

    call_command("migrate", verbosity=0)
    pool, _ = Pool.objects.get_or_create(name="bench-longpoll")
    Node.objects.bulk_create([Node(name=f"longpoll-{i}", pool=pool) for i in range(nodes)], ignore_conflicts=True)
    tokens = [NodeToken.issue(node)[1] for node in Node.objects.filter(pool=pool).order_by("pk")[:nodes]]
    user, _ = User.objects.get_or_create(username="bench-longpoll")
    return tokens, Token.objects.get_or_create(user=user)[0].key


def _serve(root: Path, database: str, redis_url: str, threads: int, port: int) -> subprocess.Popen:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings_production", "SECRET_KEY": "b" * 60,
           "SECURE_SSL_REDIRECT": "0", "DATABASE_URL": f"postgres://postgres@localhost:5432/{database}",
           "REDIS_URL": redis_url, "ROTA_BIND": f"127.0.0.1:{port}", "ROTA_WEB_WORKERS": "1",
           "ROTA_WEB_THREADS": str(threads), "ROTA_NODE_HEARTBEAT_INTERVAL_S": "30",
           "ROTA_STATIC_ROOT": tempfile.mkdtemp()}
    proc = subprocess.Popen([str(root / ".venv/bin/python"), "-m", "gunicorn", "-c", "deploy/gunicorn_asgi.conf.py"],
                            cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            requests.get(f"http://127.0.0.1:{port}/api/v1/", timeout=2)
            return proc
        except requests.RequestException:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("gunicorn did not answer")


def _run(phase, tokens, url, seconds, hold_s, user_token, server) -> dict:
    answers: list[dict] = []
    lists: list[float] = []
    end = time.monotonic() + seconds

    def node(token: str, offset_s: float) -> None:
        session = requests.Session()
        session.headers["Authorization"] = f"Node {token}"
        time.sleep(offset_s)  # nodes are not in step: each starts somewhere in its first interval
        while time.monotonic() < end:
            started = time.monotonic()
            answer = session.post(f"{url}/api/v1/node/wait/", json={"timeout_s": hold_s}, timeout=hold_s + 60).json()
            answers.append(answer)
            if not answer["waited"]:
                time.sleep(max(0.0, started + hold_s - time.monotonic()))

    def lister() -> None:
        session = requests.Session()
        session.headers["Authorization"] = f"Token {user_token}"
        while time.monotonic() < end:
            started = time.monotonic()
            assert session.get(f"{url}/api/v1/jobs/", timeout=60).status_code == 200
            lists.append(time.monotonic() - started)
            time.sleep(0.25)

    offsets = random.Random(1).choices(range(1000), k=len(tokens))
    workers = [threading.Thread(target=node, args=(token, hold_s * offset / 1000)) for token, offset in
               zip(tokens, offsets, strict=True)]
    if phase == "held, a user listing":
        workers.append(threading.Thread(target=lister))
    cpu = _cpu_s(server.pid)
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    cpu = _cpu_s(server.pid) - cpu
    held = sum(1 for a in answers if a["waited"])
    figures = {"phase": phase, "answers": len(answers), "held": held, "refused": len(answers) - held,
               "web_cpu_s": round(cpu, 2), "web_cpu_ms_per_answer": round(cpu / max(len(answers), 1) * 1000, 2),
               "web_cpu_pct": round(cpu / seconds * 100, 1)}
    if lists:
        figures.update(list_p50_s=round(statistics.median(lists), 3), list_max_s=round(max(lists), 3),
                       lists=len(lists))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", default="rota_bench_longpoll")
    parser.add_argument("--redis", default="redis://localhost:6379/15")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to serve (default: this one)")
    parser.add_argument("--threads", type=int, default=16, help="ROTA_WEB_THREADS (deploy's default)")
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--hold-s", type=float, default=4.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--port", type=int, default=18431)
    args = parser.parse_args()
    tokens, user_token = _fixtures(args.database, args.redis, args.nodes)
    server = _serve(args.root.resolve(), args.database, args.redis, args.threads, args.port)
    try:
        url = f"http://127.0.0.1:{args.port}"
        for phase, nodes, hold_s in (("empty", tokens[:args.clients], 0.0), ("held", tokens, args.hold_s),
                                     ("held, a user listing", tokens, args.hold_s)):
            figures = _run(phase, nodes, url, args.seconds, hold_s, user_token, server)
            print(json.dumps({"root": str(args.root), "load": os.getloadavg()[0], **figures}), flush=True)
    finally:
        server.terminate()
        server.wait(30)


if __name__ == "__main__":
    main()
