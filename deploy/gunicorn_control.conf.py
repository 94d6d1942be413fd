"""gunicorn settings for the node-control server (``gunicorn -c deploy/gunicorn_control.conf.py``: ``make serve``'s
``control``, ``deploy/systemd/rota-control.service``): every setting of ``deploy/gunicorn_asgi.conf.py`` for the role
``control`` (``deploy/gunicorn.conf.py``): bound to ``ROTA_CONTROL_BIND``, ``ROTA_CONTROL_WEB_WORKERS`` workers, at
users' priority. The portal it serves is the same; ``ROTA_NODE_HEARTBEAT_URL`` (the address nodes reach it at,
told in every register and heartbeat answer) is what sends the fleet's heartbeats here, and nothing else."""

import os
import runpy
from pathlib import Path

os.environ["ROTA_WEB_ROLE"] = "control"
globals().update({name: value for name, value in runpy.run_path(str(Path(__file__).with_name(
    "gunicorn_asgi.conf.py"))).items() if not name.startswith("__")})
