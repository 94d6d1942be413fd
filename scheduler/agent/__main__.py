"""Command line of the node agent.

    python -m scheduler.agent --portal URL --token TOKEN|--token-file FILE
        [--gpu-backend auto|nvml|fake] [--profile FILE|NAME] [--fault-file FILE]
        [--work-dir DIR] [--interval 2] [--hostname NAME] [--once]
        [--executor auto|container|process] [--containers-conf FILE] [--container-network none]
        [--default-image IMAGE] [--dev-run-as-self]

SIGTERM or Ctrl-C stops the node's jobs gracefully and exits; after SIGKILL the jobs keep running and the
next agent started with the same ``--work-dir`` adopts them.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading
from pathlib import Path

from scheduler.agent.client import PortalClient
from scheduler.agent.executors import EXECUTOR_NAMES, ExecutorUnavailable, open_executor
from scheduler.agent.executors.container import DEFAULT_IMAGE
from scheduler.agent.executors.identity import DEV_FLAG, secret_file_problem
from scheduler.agent.gpu import BACKEND_KINDS, NvmlUnavailable, open_backend
from scheduler.agent.gpu.profile import ProfileError
from scheduler.agent.health import DEFAULT_MAX_TEMPERATURE_C
from scheduler.agent.loop import Agent, AgentConfig

log = logging.getLogger("scheduler.agent")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Read the command line; the token may also come from ``$ROTA_NODE_TOKEN``."""
    parser = argparse.ArgumentParser(prog="python -m scheduler.agent", description="Rota node agent")
    parser.add_argument("--portal", required=True, help="portal root URL, e.g. http://127.0.0.1:8000")
    token = parser.add_mutually_exclusive_group()
    token.add_argument("--token", help="this node's token (prefer --token-file: argv is visible to all)")
    token.add_argument("--token-file", type=Path, help="file holding this node's token")
    parser.add_argument("--gpu-backend", choices=BACKEND_KINDS, default="auto")
    parser.add_argument("--profile", help="fake backend profile: a JSON file or a shipped name (h100x8)")
    parser.add_argument("--fault-file", help="fake backend: file to append fault lines to at runtime")
    parser.add_argument("--work-dir", type=Path, help="job dirs, logs and state (default var/agent/<node>)")
    parser.add_argument("--interval", type=float, default=2.0, help="heartbeat seconds until the portal says")
    parser.add_argument("--heartbeat-timeout", type=float, default=30.0, help="until the portal says")
    parser.add_argument(
        "--hostname",
        help="name to register with (default: profile node or host name); names a fake node too, "
        "whose GPU UUIDs follow it",
    )
    parser.add_argument("--max-temperature", type=int, default=DEFAULT_MAX_TEMPERATURE_C)
    parser.add_argument(
        "--once", action="store_true", help="register, one heartbeat, exit (jobs keep running)"
    )
    parser.add_argument(
        "--executor", choices=EXECUTOR_NAMES, default="auto",
        help="container (Podman: isolates tenants), process (a laptop demo only), auto: container where "
        "podman works",
    )
    parser.add_argument("--containers-conf", type=Path, help="containers.conf for podman "
                        "(default deploy/podman/containers.conf)")
    parser.add_argument("--container-network", default="none", help="podman --network of job containers")
    parser.add_argument("--default-image", default=DEFAULT_IMAGE,
                        help="image for an assignment that names none (container executor)")
    parser.add_argument(
        DEV_FLAG, action="store_true", dest="dev_run_as_self",
        help="laptop demo with --executor process: an agent that is not root runs jobs as itself instead "
        "of refusing them (teams are then NOT separated)",
    )
    parser.add_argument(
        "--service-address", help="host or IP the portal reaches this node's notebooks and inference "
        "replicas on (reported as host:port when such a job starts; without it the gateway cannot "
        "reach them)",
    )
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    if args.dev_run_as_self and args.executor != "process":
        parser.error(f"{DEV_FLAG} needs --executor process")
    if args.token_file:
        problem = secret_file_problem(args.token_file)
        if problem:
            parser.error(f"--token-file: {problem}")
        try:
            args.token = args.token_file.read_text().strip()
        except OSError as error:
            parser.error(f"--token-file: {error.strerror}: {args.token_file}")
    args.token = args.token or os.environ.get("ROTA_NODE_TOKEN", "")
    if not args.token:
        parser.error("a node token is required: --token, --token-file or $ROTA_NODE_TOKEN")
    if args.interval <= 0:
        parser.error("--interval must be positive")
    return args


class _NodeName(logging.Filter):
    """Puts the agent's current node name on every log record."""

    def __init__(self) -> None:
        super().__init__()
        self.agent: Agent | None = None
        self.node = "-"

    def filter(self, record: logging.LogRecord) -> bool:
        """Annotate, never drop."""
        record.node = self.agent.node if self.agent is not None else self.node
        return True


def main(argv: list[str] | None = None) -> int:
    """Run the agent until SIGTERM/SIGINT (or one pass with ``--once``); returns the exit status."""
    args = parse_args(argv)
    node_name = _NodeName()
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(node_name)
    handler.setFormatter(
        logging.Formatter("%(asctime)s rota-agent[%(node)s] %(levelname)s %(name)s: %(message)s")
    )
    logging.basicConfig(level=args.log_level.upper(), handlers=[handler])
    try:
        backend = open_backend(args.gpu_backend, profile=args.profile, fault_file=args.fault_file,
                               node=args.hostname)
    except (NvmlUnavailable, ProfileError) as error:
        log.error("%s", error)
        return 1
    node = args.hostname or backend.system_info().hostname
    node_name.node = node
    config = AgentConfig(
        work_dir=args.work_dir or Path("var") / "agent" / node,
        interval_s=args.interval,
        heartbeat_timeout_s=args.heartbeat_timeout,
        max_temperature_c=args.max_temperature,
        hostname=args.hostname,
        service_address=args.service_address,
    )
    try:
        executor = open_executor(
            args.executor,
            config.work_dir,
            containers_conf=args.containers_conf,
            network=args.container_network,
            fake_gpus=backend.kind == "fake",
            allow_run_as_self=args.dev_run_as_self,
            default_image=args.default_image,
            service_ip=socket.gethostbyname(args.service_address) if args.service_address else "127.0.0.1",
        )
    except ExecutorUnavailable as error:
        log.error("%s", error)
        return 1
    client = PortalClient(args.portal, args.token, token_file=args.token_file)
    agent = Agent(config, backend=backend, client=client, executor=executor)
    node_name.agent = agent
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    log.info("%s backend, %d GPUs, %s executor, work dir %s", backend.kind, len(agent.devices), executor.name,
             config.work_dir)
    return 0 if agent.run(stop, once=args.once) else 1


if __name__ == "__main__":
    sys.exit(main())
