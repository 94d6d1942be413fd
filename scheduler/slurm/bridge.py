"""The Slurm bridge's loop: each poll reads Slurm's nodes and speaks for each through the portal's node API
with that node's own token (``<token dir>/<node>.token``, issued by ``manage.py node_token issue NODE --pool
PARTITION --output …``): it registers the node (again whenever its GPUs, CPUs, memory or features change),
heartbeats it with Slurm's word on its state, mirrors a Rota drain or resume into Slurm, and (with a
``Launcher``) runs the node's assignments as Slurm jobs. The bridge holds
no database credentials and no token of its own: a node it has no token for is not spoken for.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from pathlib import Path

from scheduler.agent.client import PortalError, PortalRejected, PortalUnavailable, RegisterRequired
from scheduler.slurm.accounting import Reconciler, SlurmPortalClient
from scheduler.slurm.commands import Slurm, SlurmError
from scheduler.slurm.inventory import GpuModelMap, InventoryError, SlurmNode
from scheduler.slurm.jobs import Key, SlurmJob
from scheduler.slurm.launcher import Launcher

log = logging.getLogger(__name__)
ROTA_DRAIN_PREFIX = "rota: "  # what Rota's drains are called in Slurm (node_engine.MIRRORED_PREFIX)
OUT_OF_SERVICE = ("draining", "drained", "unhealthy")


def token_path(token_dir: Path, node: str) -> Path:
    return token_dir / f"{node}.token"


@dataclass
class NodeLink:
    """The bridge's conversation with the portal about one Slurm node."""

    name: str
    client: SlurmPortalClient
    seq: int = 0
    registered: str | None = None  # the last register body the portal accepted (without the state)


class Bridge:
    """Speaks for every enrolled Slurm node; ``poll`` is one pass, ``run`` repeats it."""

    def __init__(self, slurm: Slurm, portal_url: str, token_dir: Path, models: GpuModelMap,
                 *, launcher: Launcher | None = None, reconciler: Reconciler | None = None,
                 timeout_s: float = 10.0) -> None:
        self.slurm = slurm
        self.launcher = launcher
        self.reconciler = reconciler  # Slurm's job completion log: attempts squeue forgot, and accounting
        self.portal_url = portal_url
        self.token_dir = token_dir
        self.models = models
        self.timeout_s = timeout_s
        self.links: dict[str, NodeLink] = {}
        self._said: set[tuple[str, str]] = set()  # (node, message) warnings already logged once

    def poll(self) -> dict[str, str]:
        """One pass over Slurm's nodes; returns what happened to each (``registered``, ``heartbeat``, ``not
        enrolled``, ``unavailable``, ``rejected: …``, ``unusable: …``). Raises ``SlurmError`` when Slurm does
        not answer."""
        nodes = self.slurm.nodes()
        jobs = self.slurm.jobs() if self.launcher else {}
        if self.reconciler:
            jobs = self.reconciler.follow(jobs)
        outcomes = {node.name: self._step(node, jobs) for node in nodes}
        if self.reconciler:
            self.reconciler.send({name: link.client for name, link in self.links.items() if link.registered})
        return outcomes

    def run(self, interval_s: float, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.poll()
            except SlurmError as error:
                log.warning("Slurm did not answer: %s", error)
            stop.wait(interval_s)
        for link in self.links.values():
            link.client.close()

    def _step(self, node: SlurmNode, jobs: dict[Key, SlurmJob]) -> str:
        link = self._link(node.name)
        if link is None:
            self._once(node.name, f"Slurm node {node.name} has no token in {self.token_dir}: enroll it with "
                                  f"`python -m scheduler.slurm enroll --token-dir {self.token_dir}`")
            return "not enrolled"
        try:
            report = node.register_report(self.models)
            report["executor"] = (self.launcher.executor() if self.launcher else
                                  {"name": "slurm", "isolates": False, "detail": "the bridge launches no jobs"})
        except InventoryError as error:
            self._once(node.name, str(error))
            return f"unusable: {error}"
        inventory = json.dumps({k: v for k, v in report.items() if k != "engine"}, sort_keys=True)
        try:
            if link.registered == inventory:
                try:
                    link.seq += 1
                    body = {"seq": link.seq, "engine": report["engine"]}
                    if self.launcher:
                        body["running"] = self.launcher.running(node.name, jobs)
                    answer = link.client.heartbeat(body)
                    outcome = "heartbeat"
                except RegisterRequired:
                    answer, outcome = self._register(link, node, report, inventory), "registered"
            else:
                answer, outcome = self._register(link, node, report, inventory), "registered"
        except PortalUnavailable as error:
            log.warning("portal unavailable for %s: %s", node.name, error)
            return "unavailable"
        except PortalRejected as error:
            link.registered = None
            self._once(node.name, f"the portal refused the report of {node.name}: {error}")
            return f"rejected: {error}"
        except PortalError as error:  # RegisterRequired right after registering: try again next poll
            link.registered = None
            return f"unavailable: {error}"
        self._mirror(node, answer.get("node_state"))
        if self.launcher and outcome == "heartbeat":
            gres_types = {gpu["uuid"]: gpu["gres_type"] for gpu in report["gpus"]}
            self.launcher.reconcile(node.name, link.client, answer.get("assignments") or [], jobs, gres_types)
        return outcome

    def _register(self, link: NodeLink, node: SlurmNode, report: dict, inventory: str) -> dict:
        answer = link.client.register(report)
        link.registered, link.seq = inventory, 0
        pool = answer.get("pool")
        if pool and node.partitions and pool not in node.partitions:
            self._once(node.name, f"node {node.name} is in Rota pool {pool} but in Slurm partition(s) "
                                  f"{', '.join(node.partitions)}: move it in the portal (admin -> Nodes)")
        return answer

    def _mirror(self, node: SlurmNode, state: dict | None) -> None:
        """Make Slurm follow a drain or resume made in Rota (see scheduler/services/node_engine.py)."""
        if not state or node.rota_state == "down":
            return
        try:
            if state["state"] in OUT_OF_SERVICE and not state.get("set_by_engine") and "DRAIN" not in node.flags:
                reason = ROTA_DRAIN_PREFIX + (state.get("reason") or state["state"])
                self.slurm.drain(node.name, reason)
                log.info("drained %s in Slurm: %s", node.name, reason)
            elif state["state"] == "ready" and node.drained_by_rota:
                self.slurm.resume(node.name)
                log.info("resumed %s in Slurm (resumed in Rota)", node.name)
        except SlurmError as error:
            log.warning("could not mirror Rota's state of %s into Slurm: %s", node.name, error)

    def _link(self, name: str) -> NodeLink | None:
        link = self.links.get(name)
        if link is not None:
            return link
        path = token_path(self.token_dir, name)
        try:
            token = path.read_text().strip()
        except OSError:
            return None
        if not token:
            return None
        link = self.links[name] = NodeLink(name, SlurmPortalClient(self.portal_url, token, timeout_s=self.timeout_s,
                                                                   token_file=path))
        return link

    def _once(self, node: str, message: str) -> None:
        if (node, message) not in self._said:
            self._said.add((node, message))
            log.warning("%s", message)

    def unenrolled(self) -> list[SlurmNode]:
        """Slurm's nodes the bridge has no token for."""
        return [node for node in self.slurm.nodes() if not token_path(self.token_dir, node.name).exists()]
