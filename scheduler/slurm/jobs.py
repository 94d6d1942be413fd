"""Rota's jobs as Slurm batch jobs (pure: no I/O). An attempt is named in Slurm by its comment
``rota-job=<job id>:<attempt>``, so the two can always be matched and a submit is never repeated; its end in
Slurm becomes the node API's job event, as the node agent would send it."""

from __future__ import annotations

import json
import math
import re
import shlex
from dataclasses import dataclass

COMMENT = "rota-job={job_id}:{attempt}"
JOB_NAME = "rota-{job_id}-{attempt}"  # also names the attempt in the job completion log (which has no comment)
_COMMENT = re.compile(r"^rota-job=(\d+):(\d+)$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING", "SIGNALING",
          "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD", "REQUEUE_FED", "REQUEUE_HOLD"}
# How an attempt that ended in Slurm is reported when Rota did not ask it to stop ("stopped" requeues it,
# "time limit" in the message ends it as timed out).
STOPPED_BY_SLURM = {
    "TIMEOUT": "time limit reached in Slurm", "DEADLINE": "time limit (deadline) reached in Slurm",
    "CANCELLED": "cancelled in Slurm", "NODE_FAIL": "the node failed in Slurm",
    "BOOT_FAIL": "the node failed to boot in Slurm", "PREEMPTED": "preempted by Slurm",
}
Key = tuple[int, int]  # (Rota job id, attempt)


class LaunchError(ValueError):
    """An assignment Slurm cannot run as asked; the message says why (reported as ``start_failed``)."""


@dataclass(frozen=True)
class SlurmJob:
    """One of Rota's attempts as ``squeue --json`` shows it."""

    slurm_id: int
    key: Key
    state: str  # Slurm's job state: PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT…
    node: str  # where it runs or ran ("" while pending)
    required_node: str
    status: int  # the wait status: exit code << 8, or the signal
    reason: str
    gpus: int | None = None  # the GPUs Slurm gave it (its --gres), when Slurm says

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    @property
    def exit_code(self) -> int | None:
        return None if self.signal else (self.status >> 8) & 0xFF

    @property
    def signal(self) -> int | None:
        return (self.status & 0x7F) or None

    def on(self, node: str) -> bool:
        return node in (self.node, self.required_node)


def parse_squeue(text: str) -> dict[Key, SlurmJob]:
    """Rota's attempts among ``squeue --json --states=all``; for an attempt Slurm holds twice (never from this
    bridge) the active one, else the newest."""
    try:
        data = json.loads(text)
    except ValueError as error:
        raise LaunchError(f"squeue --json did not print JSON: {error}") from None
    found: dict[Key, SlurmJob] = {}
    for raw in data.get("jobs") or []:
        match = _COMMENT.match(raw.get("comment") or "")
        if not match:
            continue
        job = SlurmJob(slurm_id=int(raw["job_id"]), key=(int(match[1]), int(match[2])),
                       state=str(raw.get("job_state") or ""), node=raw.get("nodes") or "",
                       required_node=raw.get("required_nodes") or "", status=int(raw.get("exit_code") or 0),
                       reason=str(raw.get("state_reason") or ""), gpus=gres_gpus(raw.get("tres_per_node") or ""))
        known = found.get(job.key)
        if known is None or (job.active, job.slurm_id) > (known.active, known.slurm_id):
            found[job.key] = job
    return found


def gres_gpus(tres: str) -> int | None:
    """The GPU count of a job's ``tres_per_node`` (``gres:gpu:h100:2`` or ``gres:gpu:2``, several summed)."""
    counts = [int(m[1]) for m in re.finditer(r"gres:gpu(?::[^:,]+)?:(\d+)", tres)]
    return sum(counts) if counts else None


def run_as(assignment: dict) -> tuple[int, int]:
    """The team's uid and gid the job must run as (the assignment's ``run_as``); root is refused."""
    who = assignment.get("run_as")
    if not isinstance(who, dict):
        raise LaunchError("run_as: the portal sent no team identity to run the job as")
    ids = []
    for name in ("uid", "gid"):
        value = who.get(name)
        if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 2**31:
            raise LaunchError(f"run_as.{name}: must be an integer from 1 to {2**31 - 1}")
        ids.append(value)
    return ids[0], ids[1]


def sbatch_argv(assignment: dict, *, node: str, gres_types: dict[str, str], output: str,
                partition: str | None, as_team: bool = False) -> list[str]:
    """``sbatch`` pinned to what Rota chose: the node, the GPUs' GRES type and count, CPUs, memory and time
    limit, charged to its team's account, named by the attempt's comment, never requeued by Slurm (a node
    failure ends the attempt; Rota requeues it as a new attempt, whatever the site's ``JobRequeue``). With
    ``as_team`` (a bridge running as root) the job runs as its team's uid and gid (``--uid``/``--gid``; Slurm
    needs both to resolve on its hosts) in ``/tmp``. The script comes on stdin (``batch_script``)."""
    counts: dict[str, int] = {}
    for gpu in assignment.get("gpus") or []:
        if float(gpu.get("share", 1.0)) < 1.0:
            raise LaunchError("a fraction of a GPU cannot be run through Slurm: ask for whole GPUs")
        if gpu["uuid"] not in gres_types:
            raise LaunchError(f"GPU {gpu['uuid']} is not one of node {node}'s GPUs in Slurm")
        gres_type = gres_types[gpu["uuid"]]
        counts[gres_type] = counts.get(gres_type, 0) + 1
    job_id, attempt = assignment["job_id"], assignment["attempt"]
    argv = ["sbatch", "--parsable", f"--job-name={JOB_NAME.format(job_id=job_id, attempt=attempt)}",
            f"--nodelist={node}",
            f"--comment={COMMENT.format(job_id=job_id, attempt=attempt)}", f"--output={output}", "--export=NONE",
            "--no-requeue"]
    if as_team:
        uid, gid = run_as(assignment)
        argv += [f"--uid={uid}", f"--gid={gid}", "--chdir=/tmp"]
    if partition:
        argv.append(f"--partition={partition}")
    team = (assignment.get("run_as") or {}).get("team")
    if team:  # the team as Slurm's account: squeue, sacct and the completion log show whose job it is
        argv.append(f"--account={team}")
    if counts:
        argv.append("--gres=" + ",".join(f"gpu:{t}:{n}" if t else f"gpu:{n}" for t, n in sorted(counts.items())))
    limits = assignment.get("limits") or {}  # the job's request on this node (null: none)
    if limits.get("cpus"):
        argv.append(f"--cpus-per-task={math.ceil(float(limits['cpus']))}")
    if limits.get("memory_mb"):
        argv.append(f"--mem={int(limits['memory_mb'])}M")
    if assignment.get("time_limit_s"):
        argv.append(f"--time={math.ceil(int(assignment['time_limit_s']) / 60)}")
    return argv


def batch_script(assignment: dict) -> str:
    """The batch script: the job's environment (``ROTA_JOB_ID``…; the bridge's own is not passed on) and its
    command in bash, as the node agent runs it."""
    lines = ["#!/bin/bash", 'export PATH="${PATH:-/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin}"']
    for name, value in sorted((assignment.get("env") or {}).items()):
        if not ENV_NAME.match(name):
            raise LaunchError(f"environment variable name {name[:60]!r} is not a shell name")
        lines.append(f"export {name}={shlex.quote(str(value))}")
    lines.append(f"exec /bin/bash -c {shlex.quote(assignment.get('command') or '')}")
    return "\n".join(lines) + "\n"


def end_event(job: SlurmJob, *, attempt: int, stop_asked: bool) -> dict:
    """The node API event for an attempt that ended in Slurm. A stop Rota asked for ends as the portal
    settles it (cancelled, requeued, timed out); otherwise Slurm's own end is named."""
    event: dict = {"attempt": attempt, "type": "exited", "exit_code": job.exit_code, "signal": job.signal,
                   "message": f"Slurm job {job.slurm_id}: {job.state}"}
    if not stop_asked and job.state in STOPPED_BY_SLURM:
        event.update(type="stopped", message=f"{STOPPED_BY_SLURM[job.state]} (job {job.slurm_id})")
    elif job.state == "OUT_OF_MEMORY":
        event.update(signal=9, exit_code=None, message=f"out of memory in Slurm (job {job.slurm_id})")
    return event
