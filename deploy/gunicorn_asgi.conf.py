"""gunicorn settings for the portal over ASGI (``gunicorn -c deploy/gunicorn_asgi.conf.py``: ``make serve``,
``deploy/systemd/rota-web.service``): every setting of ``deploy/gunicorn.conf.py`` (bind, workers, timeouts,
recycling, logs, the warm-up hook), with uvicorn workers serving ``portal.asgi``, so ``/notebooks/…`` (HTTP and
websockets, the notebook proxy) is served on the same address as the rest of the portal.

Each worker runs the portal's WSGI application for every other request in fixed pools of threads
(``portal/asgi.py``), as gthread does, and each thread keeps its database connection: ``ROTA_WEB_THREADS`` for
interactive requests (users, and the nodes' heartbeats), ``ROTA_WEB_NODE_THREADS`` (default 4) for the nodes'
registers, long-poll checks and the work delivered with their news, and ``ROTA_WEB_BULK_THREADS``
(default 2) for the nodes' reports of work done (job events, log chunks, Slurm accounting), each lane with its own
queue (``portal/priority.py``), so a user's request does not queue behind the drain's reports. A node's long-poll
is checked in a thread, then held on the event loop (``portal/longpoll.py``): up to
``ROTA_NODE_ASYNC_WAITERS_PER_PROCESS`` held waits per worker, each a socket to the node and one to Redis, so the
threads are sized for the requests that work, not for the nodes (and the file limit for the nodes: ``LimitNOFILE``
in ``deploy/systemd/rota-web.service``)."""

import runpy
from pathlib import Path

globals().update({name: value for name, value in runpy.run_path(str(Path(__file__).with_name("gunicorn.conf.py")))
                  .items() if not name.startswith("__")})
worker_class = "uvicorn_worker.UvicornWorker"
wsgi_app = "portal.asgi:application"
