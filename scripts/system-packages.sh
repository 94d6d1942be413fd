#!/usr/bin/env bash
# The Debian packages Rota's tests start for real (beside PostgreSQL and Redis, which .ci/run handles):
# Slurm 22.05 and MUNGE for the Slurm bridge's tests (tests/slurm). Idempotent: installs only what is missing.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

need=()
command -v munged >/dev/null 2>&1 || [ -x /usr/sbin/munged ] || need+=(munge)
[ -x /usr/sbin/slurmctld ] || need+=(slurmctld)
[ -x /usr/sbin/slurmd ] || need+=(slurmd)
command -v sbatch >/dev/null 2>&1 || need+=(slurm-client)

if [ ${#need[@]} -gt 0 ]; then
  echo "system-packages: installing ${need[*]}"
  apt-get update -qq
  apt-get install -y -qq "${need[@]}"
fi
