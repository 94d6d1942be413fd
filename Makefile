# Rota's entry points. `make dev` runs the demo; `make test` runs the whole suite.
PY := .venv/bin/python
VENV_STAMP := .venv/.installed

.PHONY: dev serve test install system-packages lint format migrations-check check bench sim clean images

$(VENV_STAMP): requirements.txt requirements-dev.txt
	test -x $(PY) || python3 -m venv .venv
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $(VENV_STAMP)

install: $(VENV_STAMP)

# The Debian packages the suite starts for real (podman, runc, Slurm, MUNGE, chromium); installs only what is
# missing (as root, or through sudo), so `make test` on a fresh machine needs nothing else but PostgreSQL and Redis.
system-packages:
	./scripts/system-packages.sh

dev: install
	SLURM=$(SLURM) ./scripts/dev.sh

# The production deployment on one machine: gunicorn + Celery + beat (+ demo agents); README, "Serving".
serve: install
	./scripts/serve.sh

test: install system-packages
	REDIS_URL=$${ROTA_TEST_REDIS_URL:-redis://localhost:6379/15} $(PY) -m pytest $(PYTEST_ARGS)

images:  # the local container images (localhost/rota/busybox:1, localhost/rota/python:3.11, localhost/rota/notebook:1)
	./scripts/build-images.sh

lint: install
	$(PY) -m ruff check .
	$(PY) -m mypy scheduler/core
	.venv/bin/lint-imports

format: install
	$(PY) -m ruff check --fix .

migrations-check: install
	$(PY) manage.py makemigrations --check --dry-run

check: lint migrations-check test

bench: install
	$(PY) -m scheduler.bench --pending 10000 --nodes 1000

clean:
	rm -rf var/broker var/agents var/celerybeat-schedule* .pytest_cache

# Reliability tiers (tests/reliability, bench/): `make soak` restarts the shared PostgreSQL and Redis and
# runs the long fault tests; `make load` runs the loopback load benchmark (reduced default, < 10 min) against
# gunicorn under production settings, as `make serve` runs the portal; `make load LOAD_ARGS="--preset full"`
# is the issue's size (10,000 pending, 500 nodes, 50 clients; the drain gives up after 15 min).
.PHONY: soak load latency bench-peer
soak: install
	ROTA_SOAK=1 REDIS_URL=$${ROTA_TEST_REDIS_URL:-redis://localhost:6379/15} $(PY) -m pytest -s -m soak tests/reliability $(PYTEST_ARGS)

load: install
	$(PY) bench/load.py $(LOAD_ARGS)

# Submit -> running on an idle cluster under make serve's processes, leg by leg (bench/README.md).
latency: install
	$(PY) bench/latency.py $(LATENCY_ARGS)

# Rota beside tuned Slurm on this machine, one after the other: drain, idle submit -> running, submits
# (bench/peer.py; writes var/bench-peer.json; needs root for Slurm's slurmd, ~10 min).
bench-peer: install
	$(PY) bench/peer.py $(PEER_ARGS)
