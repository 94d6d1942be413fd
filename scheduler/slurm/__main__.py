"""``python -m scheduler.slurm run|enroll``: run the Slurm bridge, or print how to enroll Slurm's nodes."""

from __future__ import annotations

import argparse
import logging
import shlex
import signal
import sys
import threading
from pathlib import Path

from scheduler.agent.executors.container import DEFAULT_IMAGE
from scheduler.slurm.accounting import Reconciler
from scheduler.slurm.bridge import Bridge, token_path
from scheduler.slurm.commands import Slurm, SlurmError
from scheduler.slurm.containers import SlurmContainers
from scheduler.slurm.inventory import GpuModelMap, InventoryError
from scheduler.slurm.jobcomp import JobCompLog
from scheduler.slurm.jobs import LaunchError
from scheduler.slurm.launcher import Launcher


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m scheduler.slurm", description=__doc__)
    p.add_argument("action", choices=["run", "enroll"],
                   help="run: keep Slurm's nodes in step with the portal; enroll: print the manage.py commands "
                        "that give each Slurm node without a token one")
    p.add_argument("--token-dir", type=Path, required=True, help="holds one NODE.token per Slurm node (mode 0600)")
    p.add_argument("--portal", help="the portal's URL (run)")
    p.add_argument("--gpu-model", action="append", default=[], metavar="TYPE=SLUG[:MEMORY_MB]",
                   help="the Rota GPU model of a GRES type, e.g. h100=h100-80gb:81559 (repeatable); a GRES type "
                        "that names its size (h100-80gb) needs none")
    p.add_argument("--output-dir", type=Path,
                   help="run Rota's jobs in Slurm, their output in this directory (shared with the Slurm nodes); "
                        "without it the bridge keeps nodes in step and launches nothing")
    p.add_argument("--jobcomp", type=Path,
                   help="Slurm's job completion log (JobCompType=jobcomp/filetxt), read for the accounting "
                        "reconciliation and so that a job Slurm has forgotten is never submitted again "
                        "(default: JobCompLoc from `scontrol show config`)")
    p.add_argument("--containers", action="store_true",
                   help="run each job in its image: the batch script (root's) starts it with podman as the team's "
                        "uid, as the node agent's container executor does (needs root, podman on the nodes and "
                        "Epilog=scheduler/slurm/epilog.sh)")
    p.add_argument("--gpu-devices", type=Path, default=Path("/dev"),
                   help="where the nodes' GPU device files nvidiaN are (gres.conf File=; default /dev)")
    p.add_argument("--network", default="none", help="the containers' podman --network (default none)")
    p.add_argument("--default-image", default=DEFAULT_IMAGE,
                   help=f"the image of a job that names none (default {DEFAULT_IMAGE})")
    p.add_argument("--partition", help="the partition the bridge submits to (docs/slurm.md: RootOnly=YES)")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between polls (default 2)")
    p.add_argument("--once", action="store_true", help="poll once and exit (run)")
    p.add_argument("--slurm-conf", type=Path, help="SLURM_CONF for the Slurm commands (default: the environment's)")
    p.add_argument("--log-level", default="INFO")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    slurm = Slurm(args.slurm_conf)
    try:
        models = GpuModelMap.parse(args.gpu_model)
    except InventoryError as error:
        print(error, file=sys.stderr)
        return 2
    if args.action == "enroll":
        return enroll(slurm, args.token_dir)
    if not args.portal:
        print("run needs --portal URL", file=sys.stderr)
        return 2
    launcher = None
    if args.output_dir:
        args.output_dir.mkdir(parents=True, exist_ok=True)
        output = args.output_dir.resolve()
        containers = (SlurmContainers(output, device_dir=args.gpu_devices, network=args.network,
                                      default_image=args.default_image) if args.containers else None)
        try:
            launcher = Launcher(slurm, output, partition=args.partition, containers=containers)
        except LaunchError as error:
            print(error, file=sys.stderr)
            return 2
    reconciler = None
    if launcher:
        try:
            jobcomp = args.jobcomp or slurm.jobcomp_path()
        except SlurmError as error:
            print(error, file=sys.stderr)
            return 1
        if jobcomp is None:
            print("warning: Slurm writes no job completion log (JobCompType=jobcomp/filetxt): no accounting "
                  "reconciliation, and a job that ended longer than MinJobAge ago while the bridge was down would "
                  "be submitted again", file=sys.stderr)
        else:
            reconciler = Reconciler(JobCompLog(jobcomp))
    bridge = Bridge(slurm, args.portal, args.token_dir, models, launcher=launcher, reconciler=reconciler)
    if args.once:
        try:
            outcomes = bridge.poll()
        except SlurmError as error:
            print(error, file=sys.stderr)
            return 1
        for node, outcome in sorted(outcomes.items()):
            print(f"{node}\t{outcome}")
        return 0 if all(o in ("registered", "heartbeat") for o in outcomes.values()) else 1
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    bridge.run(args.interval, stop)
    return 0


def enroll(slurm: Slurm, token_dir: Path) -> int:
    """Print, for each Slurm node without a token file, the command a platform admin runs on the portal host
    (its Rota node is created in the pool named like the node's first partition)."""
    try:
        nodes = slurm.nodes()
    except SlurmError as error:
        print(error, file=sys.stderr)
        return 1
    for node in nodes:
        path = token_path(token_dir, node.name)
        if path.exists():
            continue
        pool = node.partitions[0] if node.partitions else "POOL"
        print(f"python manage.py node_token issue {shlex.quote(node.name)} --pool {shlex.quote(pool)} "
              f"--output {shlex.quote(str(path))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
