"""The container executor: each attempt is ``podman run`` of the job's image, held by the same shim.

The shim leads the attempt's process group and runs ``podman run`` attached, so the log, the exit code,
stops, time limits and adoption after an agent restart work as for the process executor. In the
container the job runs as its team's uid/gid with no capabilities and no new privileges, in its private
directory (mounted at ``/job``), with only its allocated GPUs' device files, no network unless the node
allows one, and its CPU, memory (no swap) and process-count limits enforced by cgroups.

A job that listens (an inference replica or a notebook: its assignment names a ``port``) on a node started
with ``--service-address`` is the exception: the portal's gateway must reach it. It joins its team's own
bridge network (``rota-svc-<team>``, created ``isolate``d, so no other team's containers are reachable from
it) and its port is published on the service address only (``--publish ADDRESS:PORT:PORT``). Every other
job keeps ``--network`` as the node sets it (none by default).

The container's first process is a small ``/bin/sh`` script: it forwards a stop signal to every
process in the container (``kill -1``), as a stop reaches the whole process group on the host. The
container always gets its own pid namespace (``--pid private``), so that signal never leaves it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import signal
from collections.abc import Iterable, Sequence
from pathlib import Path

from scheduler.agent.checkpoints import CHECKPOINT_ENV, checkpoint_file
from scheduler.agent.executors import cgroups
from scheduler.agent.executors.base import Executor
from scheduler.agent.executors.devices import GpuDeviceFiles
from scheduler.agent.executors.identity import Identity
from scheduler.agent.executors.launch import Launch, rota_env
from scheduler.agent.executors.podman import Podman, PodmanError
from scheduler.agent.jobs import Assignment, JobRecord

log = logging.getLogger(__name__)
JOB_DIR = "/job"
# pid 1 of the container: run the command, pass stop signals on to every process, exit as it did. A stop
# interrupts ``wait`` (128+signal); the shell may reap the command meanwhile, so once it is gone one more
# ``wait`` reads its own status (127: that status was already read), never the interrupted wait's.
INIT = (
    'for s in TERM INT HUP; do trap "kill -$s -1 2>/dev/null" $s; done; /bin/sh -c "$1" & p=$!; '
    's=127; while kill -0 $p 2>/dev/null; do wait $p; s=$?; done; '
    'wait $p; r=$?; [ $r -eq 127 ] || s=$r; exit $s'
)
IMAGE_PULL_FAILED = "ImagePullFailed"
OOM_KILLED = "OOMKilled"
DEFAULT_IMAGE = "localhost/rota/python:3.11"
PODMAN_FAILED = 125  # podman's own exit status when it could not create or start the container
SERVICE_KINDS = ("inference", "notebook")  # the kinds whose port the gateway (or the notebook proxy) reaches


def podman_run_args(
    *, name: str, user: str, env_file: str, job_dir: str, network: Sequence[str], image: str, command: str,
    job_id: int, attempt: int, cpus: float | None = None, pids: int | None = None,
    cgroup_parent: str | None = None, memory_mb: int | None = None,
    devices: Iterable[tuple[str, str]] = (), extra: Sequence[str] = (),
) -> list[str]:
    """``podman run`` of one attempt: its image as ``user`` (uid:gid) with no capabilities and no new
    privileges, ``network`` (podman's options, ``["--network", "none"]``), its own pid namespace,
    ``job_dir`` at /job, its environment from ``env_file``, only the ``devices`` given ((host, container)
    paths), and its limits: CPUs, processes, and memory (no swap) either under ``cgroup_parent`` (the
    agent's per-attempt cgroup) or as podman's ``--memory``. ``extra`` options go before the limits.
    Shared by the container executor and the Slurm bridge's batch script."""
    args = [
        "run", "--name", name, "--pull", "never", "--log-driver", "none", *network,
        "--user", user, "--cap-drop", "all", "--security-opt", "no-new-privileges", "--pid", "private",
        "--env-file", env_file, "--volume", f"{job_dir}:{JOB_DIR}", "--workdir", JOB_DIR,
        "--label", f"rota.job={job_id}", "--label", f"rota.attempt={attempt}", *extra,
    ]
    if cpus is not None:
        args += ["--cpus", f"{cpus:g}"]
    if cgroup_parent is not None:
        args += ["--cgroup-parent", cgroup_parent]
    elif memory_mb is not None:
        args += ["--memory", f"{memory_mb}m", "--memory-swap", f"{memory_mb}m"]
    if pids is not None:
        args += ["--pids-limit", str(pids)]
    for host, inside in devices:
        args += ["--device", f"{host}:{inside}:rw"]
    return [*args, image, "/bin/sh", "-c", INIT, "rota-init", command]


class ContainerExecutor(Executor):
    """Runs each attempt in a Podman container of its image."""

    name = "container"
    isolates = True

    def __init__(
        self,
        work_dir: str | Path,
        *,
        podman: Podman | None = None,
        network: str = "none",
        fake_gpus: bool = False,
        default_image: str | None = DEFAULT_IMAGE,
        service_address: str | None = None,
        **options: object,
    ) -> None:
        """``network`` is podman's ``--network`` (none by default); ``fake_gpus``: make stand-in devices;
        ``default_image`` runs an assignment that names no image (None: refuse it); ``service_address``: the
        address the ports of listening jobs are published on (None: they get ``network`` too)."""
        super().__init__(work_dir, **options)  # type: ignore[arg-type]
        self.podman = podman or Podman()
        self.network = network
        self.default_image = default_image
        self.service_address = service_address
        self.devices = GpuDeviceFiles(self.work_dir / "devices" if fake_gpus else None)
        self.runtime = self.podman.version()
        self._prefix = "rota-" + hashlib.sha1(str(self.work_dir).encode()).hexdigest()[:8]

    def describe(self) -> dict[str, object]:
        """Names podman's version and what the containers get."""
        return {
            **super().describe(),
            "runtime": self.runtime,
            "detail": f"each job in its image as its team's uid; only its GPUs' devices; cgroup limits on "
            f"CPU, memory and processes; network {self.network}",
        }

    def container_name(self, job_id: int, attempt: int) -> str:
        """The attempt's container: unique per agent work dir, so agents on one host never collide."""
        return f"{self._prefix}-{job_id}-{attempt}"

    # hooks ------------------------------------------------------------------------------------------

    def image_of(self, assignment: Assignment) -> str | None:
        """The image the attempt runs in: its own, else the node's default."""
        return assignment.image or self.default_image

    def _refuse(self, assignment: Assignment) -> tuple[str, str] | None:
        image = self.image_of(assignment)
        if not image:
            return "", "no image: the container executor runs every job in an image; this node has no default"
        name = next((k for k, v in assignment.env.items() if "\n" in v or "\0" in v), None)
        if name is not None:
            return "", f"env {name}: a value with a line break or NUL cannot be passed into a container"
        if self.podman.image_exists(image):
            return None
        try:
            self.podman.pull(image)
        except PodmanError as error:
            return IMAGE_PULL_FAILED, f"image {image}: {error}"
        return None

    def _launch(self, assignment: Assignment, job_dir: Path, who: Identity) -> Launch:
        name = self.container_name(assignment.job_id, assignment.attempt)
        self.podman.remove(name)  # a leftover of an agent that died between create and record
        env_file = self.work_dir / "run" / f"{name}.env"
        with open(os.open(env_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as handle:
            # the job's directory is mounted at JOB_DIR: its checkpoint file is the one the agent watches
            inside = {"HOME": JOB_DIR, CHECKPOINT_ENV: str(checkpoint_file(Path(JOB_DIR)))}
            env = {**rota_env(assignment), **inside}
            handle.writelines(f"{key}={value}\n" for key, value in env.items())
        user = f"{who.uid}:{who.gid}" if who.uid is not None else f"{os.geteuid()}:{os.getegid()}"
        limits = assignment.limits
        args = podman_run_args(
            name=name, user=user, env_file=str(env_file), job_dir=str(job_dir),
            network=self._network(assignment), image=str(self.image_of(assignment)),
            command=assignment.command, job_id=assignment.job_id, attempt=assignment.attempt,
            cpus=limits.cpus, pids=limits.pids,
            cgroup_parent=cgroups.create(name, limits.memory_mb) if limits.memory_mb is not None else None,
            devices=self.devices.for_gpus(assignment.gpus),
        )
        default = f"no image given: ran in the node's default image {self.default_image}"
        notes = () if assignment.image else (default,)
        return Launch(self.podman.argv(*args), self.podman.env, container=name, notes=notes)

    def _network(self, assignment: Assignment) -> list[str]:
        """``--network`` (and ``--publish``) of the attempt: see the module's docstring."""
        if not (assignment.port and assignment.kind in SERVICE_KINDS and self.service_address):
            return ["--network", self.network]
        team = assignment.run_as.team if assignment.run_as and assignment.run_as.team else "default"
        network = self.podman.isolated_network(f"rota-svc-{team}")
        address = self.service_address
        address = f"[{address}]" if ":" in address and not address.startswith("[") else address
        return ["--network", network, "--publish", f"{address}:{assignment.port}:{assignment.port}"]

    def _deliver(self, job: JobRecord, signum: int) -> None:
        """The signal to the container's init (which passes a stop on to all), and to podman's group."""
        if not (job.container and self.podman.kill(job.container, signum)) or signum == signal.SIGKILL:
            super()._deliver(job, signum)

    def _alive(self, job: JobRecord) -> bool:
        """The group (shim and podman) — and, when podman itself was killed, the container it left."""
        if super()._alive(job):
            return True
        state = self.podman.inspect(job.container) if job.container else None
        return bool(state and state.get("Running"))

    def _ended(
        self, job: JobRecord, exit_code: int | None, signum: int | None, message: str, started: bool
    ) -> tuple[int | None, int | None, str, str, bool]:
        state = self.podman.inspect(job.container) or {}
        reason = ""
        if not state or (exit_code == PODMAN_FAILED and state.get("Status") != "exited"):
            message = state.get("Error") or message or "podman could not create the container (see its log)"
            started = False
        else:
            code = int(state.get("ExitCode", exit_code or 0))
            exit_code, signum = (None, code - 128) if 128 < code < 128 + 65 else (code, None)
            oom = signum == signal.SIGKILL and not job.killed and job.memory_mb
            if oom and cgroups.reached_limit(job.container):
                reason, message = OOM_KILLED, f"memory limit {job.memory_mb} MiB exceeded"
        self._clean_up(job.container)
        return exit_code, signum, message, reason, started

    def _abandon(self, assignment: Assignment) -> None:
        self._clean_up(self.container_name(assignment.job_id, assignment.attempt))

    def _clean_up(self, name: str) -> None:
        """Remove the attempt's container, cgroup and environment file."""
        self.podman.remove(name)
        cgroups.remove(name)
        (self.work_dir / "run" / f"{name}.env").unlink(missing_ok=True)
