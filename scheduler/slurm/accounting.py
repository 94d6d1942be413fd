"""The bridge's side of the accounting reconciliation and of "never submit twice" after ``MinJobAge``: it follows
Slurm's job completion log (``jobcomp.py``), lets the launcher see the attempts that ended there (an attempt
``squeue`` has forgotten is not submitted again), and sends each finished attempt's record to the portal with
the token of the node it ran on, until the portal has it (``POST /api/v1/node/slurm/accounting/``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from scheduler.agent.client import PortalClient, PortalError
from scheduler.slurm.jobcomp import Completed, JobCompLog
from scheduler.slurm.jobs import Key, SlurmJob

log = logging.getLogger(__name__)
KEEP_S = 86_400.0  # an attempt's record is forgotten this long after it ended (a restart reads the file again)
BATCH = 500  # records per call (the API's limit)
WAITING = "waiting"


class SlurmPortalClient(PortalClient):
    """The node API client with the bridge's one call of its own."""

    def slurm_accounting(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        """``POST /api/v1/node/slurm/accounting/``: ``{"results": {"<job id>:<attempt>": outcome}}``."""
        return self._post("/api/v1/node/slurm/accounting/", {"records": records})


class Reconciler:
    """Slurm's finished attempts, by (Rota job id, attempt)."""

    def __init__(self, jobcomp: JobCompLog, *, clock: Callable[[], float] = time.time) -> None:
        self.jobcomp = jobcomp
        self.clock = clock
        self.completed: dict[Key, Completed] = {}
        self.unsent: dict[Key, Completed] = {}
        self.seen: dict[Key, SlurmJob] = {}  # the attempt as squeue last showed it: its GPUs and node

    def follow(self, jobs: dict[Key, SlurmJob]) -> dict[Key, SlurmJob]:
        """Read what Slurm logged since the last poll; ``jobs`` (squeue's) with the attempts that only the log
        still knows added, as ended jobs."""
        for key, job in jobs.items():
            self.seen[key] = job
        for done in self.jobcomp.read():
            self.completed[done.job.key] = self.unsent[done.job.key] = done
        horizon = self.clock() - KEEP_S
        for table in (self.completed, self.unsent):
            for key in [k for k, d in table.items() if d.ended_at and d.ended_at.timestamp() < horizon]:
                del table[key]
        for key in [k for k in self.seen if k not in jobs and k not in self.completed]:
            del self.seen[key]
        merged = dict(jobs)
        for key, done in self.completed.items():
            merged.setdefault(key, done.job)
        return merged

    def record(self, done: Completed) -> dict[str, Any]:
        """The record sent to the portal: the GPUs from the log when Slurm wrote them (slurmdbd sites), else
        from squeue's view of the job (its ``--gres``), else none (the portal then uses Rota's count)."""
        seen = self.seen.get(done.job.key)
        gpus = done.gpus if done.gpus is not None else (seen.gpus if seen else None)
        return {"job_id": done.job.key[0], "attempt": done.job.key[1], "slurm_job_id": done.job.slurm_id,
                "state": done.job.state[:30], "elapsed_s": done.elapsed_s, "gpus": gpus,
                "started_at": done.started_at.isoformat() if done.started_at else None,
                "ended_at": done.ended_at.isoformat() if done.ended_at else None}

    def node_of(self, done: Completed) -> str:
        seen = self.seen.get(done.job.key)
        return done.job.node or (seen.node or seen.required_node if seen else "")

    def send(self, clients: dict[str, SlurmPortalClient]) -> None:
        """Send each node's unsent records with its client; what the portal says it waits for (Rota still holds
        the attempt's GPUs) goes again next poll."""
        by_node: dict[str, list[Completed]] = {}
        for done in self.unsent.values():
            by_node.setdefault(self.node_of(done), []).append(done)
        for node, items in sorted(by_node.items()):
            client = clients.get(node)
            if client is None:
                continue
            for start in range(0, len(items), BATCH):
                chunk = items[start:start + BATCH]
                try:
                    results = client.slurm_accounting([self.record(d) for d in chunk]).get("results") or {}
                except PortalError as error:
                    log.warning("could not send Slurm's accounting of %s's jobs: %s", node, error)
                    break
                for done in chunk:
                    if results.get(f"{done.job.key[0]}:{done.job.key[1]}") != WAITING:
                        self.unsent.pop(done.job.key, None)
