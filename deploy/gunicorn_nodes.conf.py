"""gunicorn settings for the node agents' own server (``gunicorn -c deploy/gunicorn_nodes.conf.py``: ``make serve``'s
``nodes``, ``deploy/systemd/rota-nodes.service``): every setting of ``deploy/gunicorn_asgi.conf.py`` for the role
``nodes`` (``deploy/gunicorn.conf.py``): bound to ``ROTA_NODE_BIND``, ``ROTA_NODE_WEB_WORKERS`` workers, run at nice
``ROTA_NODE_WEB_NICE``. The portal it serves is the same; the agents' ``--portal`` (or the proxy's route for
``/api/v1/node/``) is what sends the fleet's traffic here and keeps it off users' processes."""

import os
import runpy
from pathlib import Path

os.environ["ROTA_WEB_ROLE"] = "nodes"
globals().update({name: value for name, value in runpy.run_path(str(Path(__file__).with_name(
    "gunicorn_asgi.conf.py"))).items() if not name.startswith("__")})
