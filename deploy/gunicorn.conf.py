"""gunicorn settings for the portal (``gunicorn -c deploy/gunicorn.conf.py portal.wsgi``), read from the
environment so ``make serve`` and the systemd unit share them.

Threaded workers (``gthread``): each worker process serves ``ROTA_WEB_THREADS`` requests at once. Here a node
agent's long-poll (``POST /api/v1/node/wait/``, held up to a heartbeat interval) occupies a thread, not a whole
process, up to ``ROTA_NODE_WAITERS_PER_PROCESS``; under ``deploy/gunicorn_asgi.conf.py`` (``make serve``) it is
held on the event loop instead and takes no thread, so the threads serve only requests that work.
``ROTA_WEB_WORKERS`` defaults to one process per core plus one (bench/README.md has the sync against threaded
figures that chose this).
"""

import os

from portal.env import env_int, env_str

try:
    _cores = len(os.sched_getaffinity(0))
except AttributeError:  # not Linux
    _cores = os.cpu_count() or 1

bind = [env_str("ROTA_BIND", "127.0.0.1:8000")]
workers = env_int("ROTA_WEB_WORKERS", _cores + 1, minimum=1, maximum=256)
threads = env_int("ROTA_WEB_THREADS", 16, minimum=2, maximum=1024)  # under gthread, each held long-poll takes one
worker_class = "gthread"
# A request that runs longer than this is killed with its worker; the long-poll waits at most a heartbeat.
timeout = env_int("ROTA_WEB_TIMEOUT_S", 60, minimum=5, maximum=3600)
graceful_timeout = 20
keepalive = 5
# Recycle a worker after this many requests (with jitter so they never restart together): bounds slow growth.
max_requests = env_int("ROTA_WEB_MAX_REQUESTS", 20000, minimum=0)
max_requests_jitter = max_requests // 10
accesslog = env_str("ROTA_WEB_ACCESS_LOG", "") or None
errorlog = "-"
loglevel = env_str("ROTA_WEB_LOG_LEVEL", "warning")
proc_name = "rota-web"
wsgi_app = "portal.wsgi:application"


def post_worker_init(worker):
    """Import every view (the URLconf pulls in DRF, the schema, the charts) before the worker takes its first
    request: otherwise the first requests to each fresh worker wait a second or more for those imports."""
    from django.urls import get_resolver

    get_resolver().url_patterns  # noqa: B018 - the import is the point
