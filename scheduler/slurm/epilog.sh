#!/bin/sh
# Slurm's epilog for the Slurm bridge's containers (docs/slurm.md): slurmd runs it as root on the node when each
# job ends. A job killed with SIGKILL leaves the container its podman started; this removes it.
# slurm.conf: Epilog=/path/to/rota/scheduler/slurm/epilog.sh
CONTAINERS_CONF="${ROTA_CONTAINERS_CONF:-$(dirname "$(readlink -f "$0")")/../../deploy/podman/containers.conf}"
export CONTAINERS_CONF
podman rm --force --ignore --time 0 "rota-slurm-$SLURM_JOB_ID" >/dev/null 2>&1
exit 0
