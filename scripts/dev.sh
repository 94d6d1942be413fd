#!/usr/bin/env bash
# make dev: install, pick PostgreSQL/Redis (or the SQLite + file-broker fallback), migrate, load the demo,
# then run web (uvicorn serving portal.asgi: Django and the notebook proxy) + Celery worker + beat + one fake node
# agent per demo node under honcho.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
PORT="${PORT:-8000}"
mkdir -p var

if [ -z "${DATABASE_URL:-}" ]; then
  if $PY - <<'PYEOF' 2>/dev/null
import psycopg
with psycopg.connect("postgresql://postgres@localhost:5432/postgres", connect_timeout=2, autocommit=True) as c:
    if not c.execute("SELECT 1 FROM pg_database WHERE datname='rota'").fetchone():
        c.execute("CREATE DATABASE rota")
PYEOF
  then
    export DATABASE_URL="postgres://postgres@localhost:5432/rota"
    echo "Database: PostgreSQL at localhost:5432/rota"
  else
    export DATABASE_URL="sqlite:///$PWD/var/rota.sqlite3"
    echo "PostgreSQL is not reachable on localhost:5432: falling back to SQLite at var/rota.sqlite3 (demo only)."
  fi
fi
if [ -z "${REDIS_URL:-}" ]; then
  if $PY -c "import redis; redis.Redis.from_url('redis://localhost:6379/0', socket_connect_timeout=2).ping()" 2>/dev/null; then
    export REDIS_URL="redis://localhost:6379/0"
    echo "Broker: Redis at localhost:6379"
  else
    export REDIS_URL="filesystem"
    echo "Redis is not reachable on localhost:6379: falling back to a file-based Celery broker in var/broker (demo only)."
  fi
fi

$PY manage.py migrate --noinput
$PY manage.py seed_demo --portal "http://127.0.0.1:${PORT}"

cat > var/Procfile <<PROCEOF
web: .venv/bin/uvicorn portal.asgi:application --host 127.0.0.1 --port ${PORT} --ws websockets-sansio --log-level warning
worker: .venv/bin/celery -A portal worker --loglevel=INFO --concurrency=2 --without-gossip --without-mingle
beat: .venv/bin/celery -A portal beat --loglevel=INFO --schedule=var/celerybeat-schedule
PROCEOF
# The node agents' executor: containers where Podman runs and we are root, else the process executor.
# SLURM=1 (make dev SLURM=1): a local Slurm cluster and the Slurm bridge instead of the agents.
if [ "${SLURM:-0}" = 1 ]; then
  source scripts/dev-slurm.sh
elif [ "$(id -u)" -eq 0 ] && command -v podman >/dev/null 2>&1 && ./scripts/build-images.sh; then
  AGENT_FLAGS="--executor container"
  SERVE_CMD="image localhost/rota/serve:1, command: python3 /opt/rota/serve.py"
  EXECUTOR_MSG="Node agents: container executor (Podman): each job in its image as its team's uid, with only its GPUs and cgroup limits."
else
  AGENT_FLAGS="--executor process"
  [ "$(id -u)" -eq 0 ] || AGENT_FLAGS="$AGENT_FLAGS --dev-run-as-self"
  SERVE_CMD="command: python3 $PWD/scripts/images/serve.py"
  EXECUTOR_MSG="Node agents: PROCESS executor (Podman missing or not root): jobs run on this machine as $(id -un); it does NOT isolate teams (no images, no limits, every GPU visible). Install podman (scripts/system-packages.sh) and run as root for containers."
fi
# Services (inference replicas, notebooks) are published on loopback, where the gateway reaches them: seed_demo
# gives each demo node an address of its own (127.0.0.1, 127.0.0.2, …, its --service-address), as each real
# node has its own host, so two nodes may hand out the same port.
[ "${SLURM:-0}" = 1 ] || awk -v flags="$AGENT_FLAGS" '{ print $0 " " flags }' var/agents/Procfile.agents >> var/Procfile

cat <<MSG

  Rota is starting at  http://127.0.0.1:${PORT}/
  Demo logins (password: rota-demo-2026):
    alice  member of vision        bob    team-admin of vision
    carol  member of nlp           dave   team-admin of speech
    admin  platform admin (Django admin at /admin/)
    fiona  finance: every team's usage and cost, nothing else
  API docs: http://127.0.0.1:${PORT}/api/docs/   Stop with Ctrl-C.
  ${EXECUTOR_MSG}
  Inference demo (scripts/images/serve.py, a small HTTP inference server): as alice, Submit -> Inference service,
    name llm, ${SERVE_CMD}, Replicas 2, Health path /health;
    then on http://127.0.0.1:${PORT}/services/vision/llm/ create a key (scale, autoscale there or with
    \`rota service scale vision/llm 3\`), and
    curl -H "Authorization: Bearer KEY" -d '{"prompt": "hello rota"}' http://127.0.0.1:${PORT}/serve/vision/llm/v1/generate

MSG
[ "${SLURM:-0}" = 1 ] || exec .venv/bin/honcho -f var/Procfile -d . start
.venv/bin/honcho -f var/Procfile -d . start  # SLURM=1: not exec'd, so the EXIT trap stops the cluster
