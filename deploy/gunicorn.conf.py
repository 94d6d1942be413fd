"""gunicorn settings for the portal (``gunicorn -c deploy/gunicorn.conf.py portal.wsgi``), read from the
environment so ``make serve`` and the systemd unit share them.

Threaded workers (``gthread``): each worker process serves ``ROTA_WEB_THREADS`` requests at once. Here a node
agent's long-poll (``POST /api/v1/node/wait/``, held up to a heartbeat interval) occupies a thread, not a whole
process, up to ``ROTA_NODE_WAITERS_PER_PROCESS``; under ``deploy/gunicorn_asgi.conf.py`` (``make serve``) it is
held on the event loop instead and takes no thread, so the threads serve only requests that work.
``ROTA_WEB_WORKERS`` defaults to one process per core plus one (bench/README.md has the sync against threaded
figures that chose this), or one per core when the nodes have a server of their own.

**The nodes' server.** A site may serve its node agents from a second instance of the same portal
(``ROTA_WEB_ROLE=nodes``: ``make serve`` does, ``deploy/systemd/rota-nodes.service``), at ``ROTA_NODE_BIND``,
with ``ROTA_NODE_WEB_WORKERS`` processes (default one per core) run at nice ``ROTA_NODE_WEB_NICE`` (default 5),
and point the agents' ``--portal`` there. Users' pages and API then never share a process, its interpreter lock
or its queue with the fleet's heartbeats and reports, and when the machine's cores are short the kernel gives
them first call: at the full size on 2 cores users' submit and list p99 fell from 7-20 s to ~0.1 s
(bench/README.md, "Users and nodes served apart"). Both serve every URL; which one a client uses is the site's
routing.

**Node control.** The nodes' heartbeats, the liveness signal a node is marked down without, must not wait for the
cores the nodes' server yields, nor for its interpreter lock behind the fleet's reports and registers. A third
instance (``ROTA_WEB_ROLE=control``: ``make serve`` runs one, ``deploy/systemd/rota-control.service``) at
``ROTA_CONTROL_BIND`` with ``ROTA_CONTROL_WEB_WORKERS`` processes (default 1), at users' priority, takes only
them: the portal names it to every node in its register and heartbeat answers (``ROTA_NODE_HEARTBEAT_URL``, as
the nodes reach it), and an agent that cannot reach it heartbeats at its ``--portal`` instead. At the full size on
2 cores the heartbeats' p99 fell from 1.7-2.6 s to 0.15-0.42 s (bench/README.md, "Node control apart").
"""

import os
import sys

from django.core.exceptions import ImproperlyConfigured

from portal.env import env_int, env_str

try:
    _cores = len(os.sched_getaffinity(0))
except AttributeError:  # not Linux
    _cores = os.cpu_count() or 1


def yield_cores(nice: int) -> None:
    """Run this server at ``nice``: the master's own (inherited by its workers; set, not added, since a reload
    reads this file again) and its session's. The kernel shares the cores between sessions first (autogroups)
    and weighs a thread's nice only against its own session's, and ``make serve`` (honcho) starts each of its
    processes in a session of its own, so a nice without the session's would change nothing against users'
    server. Under systemd the unit's cgroup does that (``CPUWeight=`` in ``deploy/systemd/rota-nodes.service``)."""
    os.setpriority(os.PRIO_PROCESS, 0, nice)
    try:
        with open("/proc/self/autogroup", "w") as group:
            group.write(str(nice))
    except OSError:  # no autogroups (a kernel without them, or a cgroup's task: its weight decides)
        pass


ROLE = env_str("ROTA_WEB_ROLE", "web")
if ROLE not in ("web", "nodes", "control"):
    raise ImproperlyConfigured(f"ROTA_WEB_ROLE must be web, nodes or control; got {ROLE!r}")
NODES = ROLE == "nodes"
if NODES:
    bind = [env_str("ROTA_NODE_BIND", "127.0.0.1:8001")]
    workers = env_int("ROTA_NODE_WEB_WORKERS", _cores, minimum=1, maximum=256)
    yield_cores(env_int("ROTA_NODE_WEB_NICE", 5, minimum=0, maximum=19))
elif ROLE == "control":  # the nodes' heartbeats, at users' priority: nothing else queues in its processes
    bind = [env_str("ROTA_CONTROL_BIND", "127.0.0.1:8002")]
    workers = env_int("ROTA_CONTROL_WEB_WORKERS", 1, minimum=1, maximum=256)
else:
    bind = [env_str("ROTA_BIND", "127.0.0.1:8000")]
    workers = env_int("ROTA_WEB_WORKERS", _cores if env_str("ROTA_NODE_BIND", "") else _cores + 1,
                      minimum=1, maximum=256)
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
# How long a thread that holds the interpreter lock keeps it while another waits (Python's default 5 ms): a request
# back from the database waits up to this for each of its queries while other threads compute.
SWITCH_INTERVAL_S = env_int("ROTA_WEB_SWITCH_INTERVAL_US", 1000, minimum=100, maximum=100_000) / 1e6
proc_name = f"rota-{ROLE}"
os.environ.setdefault("PGAPPNAME", proc_name)  # PostgreSQL's application_name: which server a session serves
wsgi_app = "portal.wsgi:application"


def post_worker_init(worker):
    """Import every view (the URLconf pulls in DRF, the schema, the charts) before the worker takes its first
    request: otherwise the first requests to each fresh worker wait a second or more for those imports. Under
    ASGI, also start the threads of each lane this role serves (at most ``ROTA_WEB_WARM_THREADS`` a lane where
    set), each with its database connection open (``portal/asgi.py`` ``warm``, ``portal/priority.py``).

    Then set what was imported aside from the garbage collector (``gc.freeze``): a full collection no longer
    walks the ~100 MiB of modules a worker holds, and young collections come every 20,000 allocations, not 700.
    A collection holds the interpreter lock for every thread of the worker; at the full size on 2 cores users'
    submit and list p99 were 107 / 121 ms with this against 207 / 192 without (bench/README.md, "Users and nodes
    served apart"), and a full collection had taken up to 2.4 s."""
    import gc

    from django.urls import get_resolver

    get_resolver().url_patterns  # noqa: B018 - the import is the point
    asgi = sys.modules.get("portal.asgi")  # served over ASGI (gunicorn_asgi.conf.py): its lanes' threads
    if asgi is not None:
        asgi.warm(ROLE)
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)
    sys.setswitchinterval(SWITCH_INTERVAL_S)

