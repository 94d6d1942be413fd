"""Slurm's client commands, run as subprocesses (``SLURM_CONF`` from the environment or ``--slurm-conf``).
Every failure is a ``SlurmError`` naming the command and what it printed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from scheduler.slurm.inventory import SlurmNode, parse_sinfo
from scheduler.slurm.jobs import Key, SlurmJob, parse_squeue

TIMEOUT_S = 30


class SlurmError(RuntimeError):
    """A Slurm command failed or did not answer (slurmctld down, a bad argument)."""


class Slurm:
    """The Slurm cluster the bridge speaks for."""

    def __init__(self, conf: Path | None = None) -> None:
        self.env = dict(os.environ)
        if conf is not None:
            self.env["SLURM_CONF"] = str(conf)

    def run(self, *argv: str, stdin: str | None = None) -> str:
        try:
            done = subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=TIMEOUT_S,
                                  input=stdin if stdin is not None else "")
        except (OSError, subprocess.TimeoutExpired) as error:
            raise SlurmError(f"{argv[0]}: {error}") from None
        if done.returncode != 0:
            raise SlurmError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()[:500]}")
        return done.stdout

    def nodes(self) -> list[SlurmNode]:
        """Every node of the cluster with its GRES, CPUs, memory, features, partitions, state and reason."""
        return parse_sinfo(self.run("sinfo", "--json"))

    def jobs(self) -> dict[Key, SlurmJob]:
        """Rota's attempts that Slurm holds or has ended recently (``MinJobAge``), by (job id, attempt)."""
        return parse_squeue(self.run("squeue", "--json", "--states=all"))

    def jobcomp_path(self) -> Path | None:
        """The job completion log slurmctld writes (``JobCompType=jobcomp/filetxt``, ``JobCompLoc``), else None."""
        config = dict(line.split("=", 1) for line in self.run("scontrol", "show", "config").splitlines()
                      if "=" in line)
        config = {k.strip(): v.strip() for k, v in config.items()}
        if config.get("JobCompType") != "jobcomp/filetxt" or not config.get("JobCompLoc"):
            return None
        return Path(config["JobCompLoc"])

    def drain(self, node: str, reason: str) -> None:
        """``scontrol update nodename=NODE state=drain reason=REASON``: running jobs finish, no new ones start."""
        self.run("scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}")

    def resume(self, node: str) -> None:
        """``scontrol update nodename=NODE state=resume``."""
        self.run("scontrol", "update", f"nodename={node}", "state=resume")
