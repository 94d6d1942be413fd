#!/usr/bin/env bash
# make serve: the production deployment on one machine. PostgreSQL and Redis (required: no SQLite or file
# broker here), portal.settings_production, migrations, static files collected, then under honcho:
# gunicorn (deploy/gunicorn_asgi.conf.py: deploy/gunicorn.conf.py's settings with uvicorn workers, so the notebook
# proxy's websockets are served on the same address) for users at ROTA_BIND, a second one for the node agents at
# ROTA_NODE_BIND (PORT + 1; at nice ROTA_NODE_WEB_NICE: users first when cores are short; empty: the agents use
# ROTA_BIND), a third for the nodes' heartbeats at ROTA_CONTROL_BIND (PORT + 2, with a nodes' server; at users'
# priority; its address, ROTA_NODE_HEARTBEAT_URL, is told to each node as it registers), Celery worker(s), beat and,
# unless ROTA_SERVE_DEMO=0, the demo data and one fake node agent per demo node, pointed at the nodes' server.
# Knobs: PORT, ROTA_BIND, ROTA_NODE_BIND, ROTA_CONTROL_BIND, ROTA_NODE_HEARTBEAT_URL, ROTA_WEB_WORKERS,
# ROTA_NODE_WEB_WORKERS, ROTA_CONTROL_WEB_WORKERS, ROTA_NODE_WEB_NICE,
# ROTA_WEB_THREADS, ROTA_CELERY_WORKERS, ROTA_SERVE_DEMO, and every variable of portal/settings.py (DATABASE_URL,
# REDIS_URL, SECRET_KEY, ALLOWED_HOSTS, ...).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
PORT="${PORT:-8000}"
VAR="${ROTA_VAR_DIR:-$PWD/var}"
mkdir -p "$VAR"

export DJANGO_SETTINGS_MODULE=portal.settings_production
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@localhost:5432/rota}"
export REDIS_URL="${REDIS_URL:-redis://localhost:6379/0}"
export ROTA_BIND="${ROTA_BIND:-127.0.0.1:${PORT}}"
export ROTA_NODE_BIND="${ROTA_NODE_BIND-127.0.0.1:$((PORT + 1))}"
NODE_URL="http://${ROTA_NODE_BIND:-$ROTA_BIND}"
# With a nodes' server, the nodes' heartbeats go to a control server of their own (deploy/gunicorn.conf.py).
# Its address as the agents here reach it (a bind to every interface is reached on loopback); an explicitly empty
# ROTA_NODE_HEARTBEAT_URL keeps the heartbeats at the agents' --portal.
if [ -n "$ROTA_NODE_BIND" ]; then
  export ROTA_CONTROL_BIND="${ROTA_CONTROL_BIND-127.0.0.1:$((PORT + 2))}"
else
  export ROTA_CONTROL_BIND=""
fi
if [ -n "$ROTA_CONTROL_BIND" ]; then
  CONTROL_HOST_PORT="$(echo "$ROTA_CONTROL_BIND" | sed -e 's/^0\.0\.0\.0:/127.0.0.1:/' -e 's/^\[::\]:/[::1]:/')"
  export ROTA_NODE_HEARTBEAT_URL="${ROTA_NODE_HEARTBEAT_URL-http://$CONTROL_HOST_PORT}"
else
  export ROTA_NODE_HEARTBEAT_URL=""  # no control server started here: none to name
fi
# One machine, plain HTTP on loopback: TLS belongs to the proxy in front of a real site (deploy/README.md).
export SECURE_SSL_REDIRECT="${SECURE_SSL_REDIRECT:-0}"
if [ -z "${SECRET_KEY:-}" ]; then  # one key per machine, made once, readable by its owner only
  if [ ! -s "$VAR/secret_key" ]; then
    (umask 077 && $PY -c "import secrets; print(secrets.token_urlsafe(50))" > "$VAR/secret_key")
  fi
  SECRET_KEY="$(cat "$VAR/secret_key")"
  export SECRET_KEY
fi
CORES="$($PY -c 'import os; print(len(os.sched_getaffinity(0)))')"
CELERY_WORKERS="${ROTA_CELERY_WORKERS:-$CORES}"

if ! $PY -c "import redis, os; redis.Redis.from_url(os.environ['REDIS_URL'], socket_connect_timeout=2).ping()" \
    2>/dev/null; then
  echo "make serve needs Redis at $REDIS_URL (set REDIS_URL); make dev runs without it." >&2
  exit 1
fi
$PY manage.py migrate --noinput
$PY manage.py collectstatic --noinput --verbosity 0
AGENTS=""
if [ "${ROTA_SERVE_DEMO:-1}" != "0" ]; then
  # The demo agents run each job in its image where Podman runs and we are root (--executor auto picks the
  # container executor there): the local images first (scripts/build-images.sh skips those present).
  if [ "$(id -u)" -eq 0 ] && command -v podman >/dev/null 2>&1; then
    ./scripts/build-images.sh
  fi
  $PY manage.py seed_demo --portal "$NODE_URL" --agents-dir "$VAR/agents"
  AGENTS="$VAR/agents/Procfile.agents"
fi

cat > "$VAR/Procfile.serve" <<PROCEOF
web: .venv/bin/gunicorn -c deploy/gunicorn_asgi.conf.py
worker: .venv/bin/celery -A portal worker --loglevel=WARNING --concurrency=${CELERY_WORKERS} --without-gossip --without-mingle
beat: .venv/bin/celery -A portal beat --loglevel=WARNING --schedule=$VAR/celerybeat-schedule
PROCEOF
if [ -n "$ROTA_NODE_BIND" ]; then
  echo "nodes: .venv/bin/gunicorn -c deploy/gunicorn_nodes.conf.py" >> "$VAR/Procfile.serve"
fi
if [ -n "$ROTA_CONTROL_BIND" ]; then
  echo "control: .venv/bin/gunicorn -c deploy/gunicorn_control.conf.py" >> "$VAR/Procfile.serve"
fi
if [ -n "$AGENTS" ]; then cat "$AGENTS" >> "$VAR/Procfile.serve"; fi

echo "Rota (production settings) is starting at http://${ROTA_BIND}/ with $CORES cores; node agents: $NODE_URL." \
  "Stop with Ctrl-C."
exec .venv/bin/honcho -f "$VAR/Procfile.serve" -d . start
