#!/usr/bin/env bash
# The Debian packages Rota's tests start for real, beside PostgreSQL and Redis (idempotent):
# podman and runc (deploy/podman/containers.conf selects runc), busybox-static and python3 for the
# images scripts/build-images.sh makes (the node agent's container executor); munge, slurmctld, slurmd
# and slurm-client (Slurm 22.05) for the Slurm bridge's tests (tests/slurm); chromium for the browser tests
# (tests/browser, driven by Playwright; never `playwright install`). Only missing packages are installed.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
missing=()
for package in podman runc busybox-static python3 munge slurmctld slurmd slurm-client chromium; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "system-packages: installing ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq "${missing[@]}"
fi
