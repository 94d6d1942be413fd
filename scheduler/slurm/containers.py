"""The job's image under Slurm: the batch script (run by slurmd as root, as the bridge submits it) starts the
attempt's container with the same ``podman run`` arguments as the node agent's container executor
(``scheduler.agent.executors.container.podman_run_args``): the image as the team's uid and gid with no
capabilities and no new privileges, its CPU, memory and process limits, only the GPUs Slurm gave the job
(``SLURM_JOB_GPUS``, device files ``<device dir>/nvidia<index>``) and no network unless the bridge allows one.
The container's output goes to the batch output the bridge ships to the portal.

A stop reaches the container as on an agent: ``scancel --signal=TERM`` reaches podman, which passes it to the
container's init, which passes it to every process inside. A ``KILL`` ends podman but not the container it
started: Slurm's epilog (``scheduler/slurm/epilog.sh``, ``Epilog=`` in slurm.conf) removes the job's container
``rota-slurm-<Slurm job id>`` when the job ends, whatever ended it.
"""

from __future__ import annotations

import os
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from scheduler.agent.executors.container import DEFAULT_IMAGE, JOB_DIR, podman_run_args
from scheduler.agent.executors.devices import SHARED_NVIDIA
from scheduler.agent.executors.podman import Podman
from scheduler.slurm.jobs import ENV_NAME, Key, LaunchError

EPILOG = Path(__file__).resolve().parent / "epilog.sh"
_NAME = "\0container"  # stand-ins for what only the batch script knows: the Slurm job id, the GPUs Slurm chose
_DEVICES = "\0devices"
_SHELL = {_NAME: '"$ROTA_CONTAINER"', _DEVICES: '"${ROTA_DEVICES[@]}"'}


@dataclass
class SlurmContainers:
    """How the bridge runs each job in its image under Slurm (``--containers``)."""

    work_dir: Path  # the bridge's output directory (shared with the Slurm nodes): env files and job directories
    podman: Podman = field(default_factory=Podman)
    device_dir: Path = Path("/dev")
    network: str = "none"
    default_image: str | None = DEFAULT_IMAGE

    def __post_init__(self) -> None:
        self.runtime = self.podman.version() or "podman"  # asked once: the executor is described every poll

    def describe(self) -> str:
        return (f"each job in its image ({self.runtime} under Slurm) as its team's uid: no "
                f"capabilities, only its GPUs' devices, CPU, memory and process limits, network {self.network}")

    def env_file(self, key: Key) -> Path:
        return self.work_dir / f"rota-{key[0]}-{key[1]}.env"

    def job_dir(self, key: Key) -> Path:
        return self.work_dir / f"rota-{key[0]}-{key[1]}.job"

    def script(self, assignment: dict, key: Key, uid: int, gid: int) -> str:
        """Write the attempt's environment file (root's, 0600) and job directory (the team's, 0700); the batch
        script that runs its container."""
        image = assignment.get("image") or self.default_image
        if not image:
            raise LaunchError("image: the job names no image and the bridge has no default image")
        env = {**(assignment.get("env") or {}), "ROTA_JOB_ID": str(key[0]), "ROTA_ATTEMPT": str(key[1]),
               "HOME": JOB_DIR}
        for name, value in env.items():
            if not ENV_NAME.match(name):
                raise LaunchError(f"environment variable name {name[:60]!r} is not a shell name")
            if "\n" in str(value) or "\0" in str(value):
                raise LaunchError(f"env {name}: a value with a line break or NUL cannot be passed into a container")
        self._prepare(key, env, uid, gid)
        limits = assignment.get("limits") or {}
        args = podman_run_args(
            name=_NAME, user=f"{uid}:{gid}", env_file=str(self.env_file(key)), job_dir=str(self.job_dir(key)),
            network=["--network", self.network], image=image, command=assignment.get("command") or "", job_id=key[0],
            attempt=key[1], cpus=float(limits["cpus"]) if limits.get("cpus") else None,
            pids=int(limits["pids"]) if limits.get("pids") else None,
            memory_mb=int(limits["memory_mb"]) if limits.get("memory_mb") else None,
            extra=["--rm", "--env", "CUDA_VISIBLE_DEVICES", _DEVICES])
        devices = shlex.quote(str(self.device_dir))
        lines = [
            "#!/bin/bash",
            'export PATH="${PATH:-/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin}"',
            f"export CONTAINERS_CONF={shlex.quote(str(self.podman.conf))}",
            'ROTA_CONTAINER="rota-slurm-$SLURM_JOB_ID"  # the epilog removes it (scheduler/slurm/epilog.sh)',
            "ROTA_DEVICES=()",
            f'for i in ${{SLURM_JOB_GPUS//,/ }}; do ROTA_DEVICES+=(--device "{devices}/nvidia$i:/dev/nvidia$i:rw"); '
            "done",
            f"for d in {' '.join(SHARED_NVIDIA)}; do "
            f'[ -e {devices}/"$d" ] && ROTA_DEVICES+=(--device {devices}/"$d:/dev/$d:rw"); done',
            f"podman image exists {shlex.quote(image)} || podman pull --quiet {shlex.quote(image)} >/dev/null || "
            f"{{ echo {shlex.quote(f'rota: image {image} is not on this node and cannot be pulled')} >&2; exit 125; }}",
            "exec podman " + " ".join(_SHELL.get(arg) or shlex.quote(arg) for arg in args),
        ]
        return "\n".join(lines) + "\n"

    def _prepare(self, key: Key, env: dict, uid: int, gid: int) -> None:
        path = self.env_file(key)
        try:
            with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600), "w") as handle:
                handle.writelines(f"{name}={value}\n" for name, value in env.items())
            job_dir = self.job_dir(key)
            job_dir.mkdir(mode=0o700, exist_ok=True)
            os.chown(job_dir, uid, gid, follow_symlinks=False)
        except OSError as error:
            raise LaunchError(f"cannot prepare the job's files in {self.work_dir}: {error}") from None

    def clean(self, key: Key) -> None:
        """The attempt's environment file and job directory, once it has ended."""
        self.env_file(key).unlink(missing_ok=True)
        shutil.rmtree(self.job_dir(key), ignore_errors=True)


def container_end(event: dict) -> dict:
    """podman exits 128+N when the container's process died of signal N: the event names the signal, as the
    agent's container executor does."""
    code = event.get("exit_code")
    if event.get("type") == "exited" and isinstance(code, int) and 128 < code < 128 + 65:
        return {**event, "exit_code": None, "signal": code - 128}
    return event
