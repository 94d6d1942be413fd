"""A user's API request through the whole web stack, one client: ``python bench/api_stack.py [--root CHECKOUT]``.

The portal as ``make serve`` runs it (gunicorn, uvicorn workers, ``deploy/gunicorn_asgi.conf.py``, production
settings; one worker here) from ``--root`` (this checkout by default: give another to compare, e.g. main's), on
a database that ``bench/api_profile.py`` seeded (``--database``, its default); one keep-alive client sends
``--requests`` job lists (``GET /api/v1/jobs/?limit=50``) and submits one after the other, with a seeded user's
token, and the script prints the web processes' CPU per request (``/proc``: the worker and its arbiter) and the
client's wall time per request. Each submit's "cycle wanted" flag is cleared as a cycle would clear it, so
every submit sends its wake-up, as in ``api_profile``."""

from __future__ import annotations

import argparse
import http.client
import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from load import DEFAULT_REDIS_URL, _children, _cpu_s  # noqa: E402


def _web_cpu_s(pid: int) -> float:
    return sum(_cpu_s(p) or 0.0 for p in [pid, *_children(pid)])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout whose portal is served")
    parser.add_argument("--database", default="rota_api_profile", help="seeded by bench/api_profile.py")
    parser.add_argument("--redis-url", default=DEFAULT_REDIS_URL)
    parser.add_argument("--requests", type=int, default=300, help="requests of each kind timed")
    parser.add_argument("--kinds", default="list,submit")
    args = parser.parse_args()
    base_url = os.environ.get("ROTA_LOAD_DATABASE_URL", "postgres://postgres@localhost:5432")
    port = 18000 + secrets.randbelow(1000)
    env = {**os.environ, "DATABASE_URL": f"{base_url}/{args.database}", "REDIS_URL": args.redis_url,
           "DJANGO_SETTINGS_MODULE": "portal.settings_production", "SECURE_SSL_REDIRECT": "0", "DEBUG": "0",
           "SECRET_KEY": secrets.token_urlsafe(50), "ALLOWED_HOSTS": "127.0.0.1,localhost", "LOG_LEVEL": "WARNING",
           "ROTA_REQUIRE_ISOLATION": "0", "ROTA_BIND": f"127.0.0.1:{port}", "ROTA_WEB_WORKERS": "1",
           "ROTA_STATIC_ROOT": str(args.root / "var" / "api-stack-static"), "PYTHONUNBUFFERED": "1"}
    log = open(args.root / "var" / "api-stack-server.log", "w") if (args.root / "var").is_dir() else subprocess.DEVNULL
    server = subprocess.Popen([str(args.root / ".venv/bin/gunicorn"), "-c", "deploy/gunicorn_asgi.conf.py"],
                              cwd=args.root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        import psycopg
        import redis

        with psycopg.connect(f"{base_url}/{args.database}") as db:
            token = db.execute("SELECT t.key FROM authtoken_token t JOIN auth_user u ON u.id = t.user_id "
                               "ORDER BY u.id LIMIT 1").fetchone()[0]
        flags = redis.Redis.from_url(args.redis_url)
        headers = {"Authorization": f"Token {token}"}
        client = None
        for _ in range(300):  # until the server answers
            try:
                client = http.client.HTTPConnection("127.0.0.1", port)
                client.request("GET", "/api/v1/jobs/?limit=1", headers=headers)
                client.getresponse().read()
                break
            except OSError:
                time.sleep(0.1)
        count = iter(range(10**9))

        def send(kind: str) -> None:
            if kind == "list":
                client.request("GET", "/api/v1/jobs/?limit=50", headers=headers)
            else:
                body = json.dumps({"name": f"stack-{next(count)}", "command": "true", "gpu_model": "h100-80gb"})
                client.request("POST", "/api/v1/jobs/", body=body,
                               headers={**headers, "Content-Type": "application/json"})
            answer = client.getresponse()
            content = answer.read()
            if answer.status not in (200, 201):
                raise SystemExit(f"{kind}: HTTP {answer.status}: {content[:300]!r}")
            if kind == "submit":
                flags.delete("rota:cycle:wanted")  # as a cycle taking the wake-up would

        for kind in args.kinds.split(","):
            for _ in range(20):  # warm: imports, connections
                send(kind)
            cpu, started = _web_cpu_s(server.pid), time.perf_counter()
            for _ in range(args.requests):
                send(kind)
            cpu, wall = _web_cpu_s(server.pid) - cpu, time.perf_counter() - started
            print(f"{kind:>7}: web CPU {1000 * cpu / args.requests:.2f} ms a request, "
                  f"wall {1000 * wall / args.requests:.2f} ms (one client, {args.requests} requests)")
    finally:
        os.killpg(server.pid, 15)
        server.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
