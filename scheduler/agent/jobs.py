"""The agent's job records: what the portal assigns, what runs locally, and what gets reported."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

RUNNING = "running"
STOPPING = "stopping"

# Why the agent stopped a job. "requested": the portal asked (an unlisted job or desired=stopped);
# the others are the agent's own decision and are reported as a "stopped" event.
STOP_REQUESTED = "requested"
STOP_TIME_LIMIT = "time-limit"
STOP_PORTAL_LOST = "portal-lost"
STOP_SHUTDOWN = "shutdown"
STOP_LEFTOVERS = "leftovers"  # the command ended but processes it started are still in its group
STOP_UNHEALTHY = "unhealthy"  # its health probe failed too often (scheduler/agent/probes.py)
UNHEALTHY = "Unhealthy"  # the end event's reason for such a stop

DEFAULT_GRACE_PERIOD_S = 30.0


class AssignmentError(ValueError):
    """An assignment the agent cannot act on (the message names the field)."""


@dataclass(frozen=True, slots=True)
class RunAs:
    """The unprivileged Unix identity of the job's team (``run_as`` on the wire)."""

    uid: int
    gid: int
    team: str = ""

    @classmethod
    def from_wire(cls, data: Any) -> RunAs | None:
        """``{"uid", "gid", "team"}`` or None; root (0) is refused: a job never runs as root."""
        if data is None:
            return None
        if not isinstance(data, dict):
            raise AssignmentError("run_as: must be an object with uid and gid")
        for name in ("uid", "gid"):
            value = data.get(name)
            if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 2**31:
                raise AssignmentError(f"run_as.{name}: must be an integer from 1 to {2**31 - 1}")
        return cls(data["uid"], data["gid"], str(data.get("team") or ""))


@dataclass(frozen=True, slots=True)
class Limits:
    """What the job may use of the node; None is unlimited. Enforced by the container executor."""

    cpus: float | None = None
    memory_mb: int | None = None
    pids: int | None = None

    @classmethod
    def from_wire(cls, data: Any) -> Limits:
        """``{"cpus", "memory_mb", "pids"}``, each optional and positive."""
        if data is None:
            return cls()
        if not isinstance(data, dict):
            raise AssignmentError("limits: must be an object")
        values: dict[str, Any] = {}
        for name, kind in (("cpus", float), ("memory_mb", int), ("pids", int)):
            value = data.get(name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise AssignmentError(f"limits.{name}: must be a positive number or null")
            if kind is int and value != int(value):
                raise AssignmentError(f"limits.{name}: must be a whole number")
            values[name] = kind(value)
        return cls(**values)

    def describe(self) -> str:
        """``cpus 2, memory 256 MiB, pids 64`` (unlimited ones left out)."""
        parts = [
            f"cpus {self.cpus:g}" if self.cpus is not None else "",
            f"memory {self.memory_mb} MiB" if self.memory_mb is not None else "",
            f"pids {self.pids}" if self.pids is not None else "",
        ]
        return ", ".join(part for part in parts if part) or "no limits"


@dataclass(frozen=True, slots=True)
class AssignedGpu:
    """One device given to a job; ``share`` < 1 for a fraction of a GPU."""

    index: int
    uuid: str
    share: float = 1.0


@dataclass(frozen=True, slots=True)
class Assignment:
    """One entry of the heartbeat answer's ``assignments`` list."""

    job_id: int
    attempt: int
    desired: str
    command: str
    env: dict[str, str] = field(default_factory=dict)
    gpus: tuple[AssignedGpu, ...] = ()
    time_limit_s: float | None = None
    grace_period_s: float = DEFAULT_GRACE_PERIOD_S
    kind: str = "training"
    image: str | None = None
    run_as: RunAs | None = None
    limits: Limits = field(default_factory=Limits)
    port: int | None = None  # notebooks and inference: where the job listens (also in its env as ROTA_PORT)

    @property
    def key(self) -> str:
        """``"<job_id>:<attempt>"``, the agent's name for one attempt of a job."""
        return job_key(self.job_id, self.attempt)

    @classmethod
    def from_wire(cls, data: Any) -> Assignment:
        """Validate one assignment from the portal's JSON."""
        if not isinstance(data, dict):
            raise AssignmentError("assignment: must be an object")
        for name in ("job_id", "attempt"):
            if not isinstance(data.get(name), int) or isinstance(data.get(name), bool):
                raise AssignmentError(f"{name}: must be an integer")
        desired = data.get("desired", RUNNING)
        if desired not in ("running", "stopped"):
            raise AssignmentError("desired: must be 'running' or 'stopped'")
        env = data.get("env") or {}
        if not isinstance(env, dict):
            raise AssignmentError("env: must be an object")
        try:
            gpus = tuple(
                AssignedGpu(int(g["index"]), str(g["uuid"]), float(g.get("share", 1.0)))
                for g in data.get("gpus") or []
            )
        except (KeyError, TypeError, ValueError) as error:
            raise AssignmentError(f"gpus: each needs index and uuid ({error})") from error
        limit = data.get("time_limit_s")
        grace = data.get("grace_period_s")
        image = data.get("image")
        if image is not None and (not isinstance(image, str) or not image.strip() or len(image) > 500):
            raise AssignmentError("image: must be an image reference (1 to 500 characters) or null")
        port = data.get("port")
        if port is not None and (not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536):
            raise AssignmentError("port: must be an integer from 1 to 65535 or null")
        return cls(
            job_id=data["job_id"],
            attempt=data["attempt"],
            desired=desired,
            command=str(data.get("command") or ""),
            env={str(k): str(v) for k, v in env.items()},
            gpus=gpus,
            time_limit_s=float(limit) if limit else None,
            grace_period_s=float(grace) if grace is not None else DEFAULT_GRACE_PERIOD_S,
            kind=str(data.get("kind") or "training"),
            image=image.strip() if image else None,
            run_as=RunAs.from_wire(data.get("run_as")),
            limits=Limits.from_wire(data.get("limits")),
            port=port,
        )


def _plain_fields(record) -> dict[str, Any]:
    """A dataclass of plain values (numbers, strings, lists of strings) as a dict of its fields, for the state
    file: the values themselves, not ``dataclasses.asdict``'s deep copies (a save serialises them at once)."""
    return {name: getattr(record, name) for name in record.__dataclass_fields__}


def job_key(job_id: int, attempt: int) -> str:
    """The agent's name for one attempt of a job."""
    return f"{job_id}:{attempt}"


@dataclass(slots=True)
class JobRecord:
    """One attempt the agent runs (or adopted). Persisted in the state file so a restart can find it.

    ``pid`` is the leader (the shim) and the process group id; ``started_at`` is Unix time; ``log_offset``
    is how many bytes of the log the portal has acknowledged.
    """

    job_id: int
    attempt: int
    pid: int
    start_ticks: int | None
    boot_id: str
    log_path: str
    status_path: str
    started_at: float
    gpus: list[str]
    time_limit_s: float | None = None
    grace_period_s: float = DEFAULT_GRACE_PERIOD_S
    kind: str = "training"
    uid: int | None = None  # whom the command runs as (None: the agent's own user)
    container: str = ""  # the container executor's container name
    memory_mb: int | None = None  # the memory limit, to name it when the job is OOM-killed
    state: str = RUNNING
    stop_cause: str | None = None
    stop_message: str = ""
    term_sent_at: float | None = None
    killed: bool = False
    log_offset: int = 0
    checkpoint_before: float | None = None  # the checkpoint file's time before the launch (None: no file)
    checkpoint_at: float | None = None  # the checkpoint file's last change reported (Unix time)

    @property
    def key(self) -> str:
        """``"<job_id>:<attempt>"``."""
        return job_key(self.job_id, self.attempt)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON for the state file."""
        return _plain_fields(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> JobRecord:
        """Rebuild from the state file, ignoring fields a newer agent may have added."""
        known = set(cls.__dataclass_fields__)
        fields = {k: v for k, v in data.items() if k in known}
        fields.setdefault("checkpoint_before", fields.get("started_at"))  # an older agent's record: its rule
        return cls(**fields)


@dataclass(frozen=True, slots=True)
class JobEvent:
    """A lifecycle report for ``POST /api/v1/node/jobs/{job_id}/events/``.

    For end events, ``log_path``/``log_offset`` say what of the log still has to reach the portal first.
    """

    job_id: int
    attempt: int
    type: str  # started | exited | stopped | start_failed | checkpoint
    at: str
    pid: int | None = None
    exit_code: int | None = None
    signal: int | None = None
    message: str = ""
    log_path: str | None = None
    log_offset: int = 0
    reason: str = ""  # "OOMKilled", "ImagePullFailed", "Unhealthy" or ""
    address: str = ""  # started: host:port the portal reaches the job's service on ("" when none)
    health: str = ""  # started: "starting" when the agent probes the service's health ("" when it does not)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON for the state file (``JobEvent(**it)`` again)."""
        return _plain_fields(self)

    def body(self) -> dict[str, Any]:
        """The protocol body (the message cut to the portal's 500 characters)."""
        return {
            "attempt": self.attempt,
            "type": self.type,
            "pid": self.pid,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "message": self.message[:500],
            "reason": self.reason,
            "at": self.at,
            **({"address": self.address} if self.address else {}),
            **({"health": self.health} if self.health else {}),
        }
