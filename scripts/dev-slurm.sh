# make dev SLURM=1 (sourced by scripts/dev.sh after migrate and seed_demo): a local Slurm 22.05 cluster and the
# Slurm bridge instead of the fake node agents (docs/slurm.md, "The demo on Slurm"; scheduler/slurm/localcluster.py). One node slurm-gpu-01 with
# 8 stand-in GPUs (gpu:h100) in partition train, enrolled in Rota's pool train; each job runs in its image
# (podman under Slurm) as its team's uid. Everything lives in var/slurm; the cluster stops with the demo.
[ "$(id -u)" -eq 0 ] || { echo "SLURM=1: slurmd and the bridge's containers need root (run make dev SLURM=1 as root)" >&2; exit 1; }
./scripts/build-images.sh
SLURM_DIR="$PWD/var/slurm"
mkdir -p "$SLURM_DIR/tokens" "$SLURM_DIR/output"
chmod 0711 "$PWD/var" "$SLURM_DIR" "$SLURM_DIR/output"
chmod 0700 "$SLURM_DIR/tokens"
$PY -m scheduler.slurm.localcluster down "$SLURM_DIR/cluster"  # a cluster an earlier demo left running, by its PIDs
rm -rf "$SLURM_DIR/cluster"
$PY -m scheduler.slurm.localcluster up "$SLURM_DIR/cluster" --partition train --node slurm-gpu-01 \
  --epilog "$PWD/scheduler/slurm/epilog.sh"
export SLURM_CONF="$SLURM_DIR/cluster/etc/slurm.conf"
trap '$PY -m scheduler.slurm.localcluster down "$SLURM_DIR/cluster"' EXIT
TOKEN="$SLURM_DIR/tokens/slurm-gpu-01.token"
if [ ! -s "$TOKEN" ]; then
  $PY manage.py node_token issue slurm-gpu-01 --pool train --output "$TOKEN" --reason "make dev SLURM=1" 2>/dev/null ||
    $PY manage.py node_token rotate slurm-gpu-01 --output "$TOKEN" --reason "make dev SLURM=1"
fi
cat >> var/Procfile <<PROCEOF
bridge: sleep 3 && $PY -m scheduler.slurm run --portal http://127.0.0.1:${PORT} --token-dir $SLURM_DIR/tokens --gpu-model h100=h100-80gb:81559 --output-dir $SLURM_DIR/output --containers --gpu-devices $SLURM_DIR/cluster/dev --interval 0.5
PROCEOF
EXECUTOR_MSG="Slurm: the bridge runs each job through sbatch on slurm-gpu-01 (8 x gpu:h100) in its image; no fake node agents.
  Watch Slurm's queue:  SLURM_CONF=$SLURM_CONF squeue --states=all"
