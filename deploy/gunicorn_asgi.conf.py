"""gunicorn settings for the portal over ASGI (``gunicorn -c deploy/gunicorn_asgi.conf.py``: ``make serve``,
``deploy/systemd/rota-web.service``): every setting of ``deploy/gunicorn.conf.py`` (bind, workers, timeouts,
recycling, logs, the warm-up hook), with uvicorn workers serving ``portal.asgi``, so ``/notebooks/…`` (HTTP and
websockets, the notebook proxy) is served on the same address as the rest of the portal.

A uvicorn worker runs Django's sync views each in a thread of its own (Django's ASGI handler), so a node's
long-poll holds a thread, not the worker, as under gthread; ``threads`` does not apply."""

import runpy
from pathlib import Path

globals().update({name: value for name, value in runpy.run_path(str(Path(__file__).with_name("gunicorn.conf.py")))
                  .items() if not name.startswith("__")})
worker_class = "uvicorn_worker.UvicornWorker"
wsgi_app = "portal.asgi:application"
