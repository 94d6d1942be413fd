"""A thin wrapper over the ``podman`` command line: the few calls the container executor makes.

Every call runs ``podman`` with ``CONTAINERS_CONF`` set to the project's configuration
(``deploy/podman/containers.conf``: runc, cgroupfs, no default ulimits) unless another is given.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

DEFAULT_CONF = Path(__file__).resolve().parents[3] / "deploy" / "podman" / "containers.conf"
CALL_TIMEOUT_S = 30.0
PULL_TIMEOUT_S = 300.0


class PodmanError(Exception):
    """A podman call failed; the message is podman's own (its last line of stderr)."""


class Podman:
    """Runs ``podman`` subcommands and returns their output."""

    def __init__(self, conf: Path | None = None, binary: str = "podman") -> None:
        """``conf`` is the containers.conf to use (the project's by default)."""
        self.binary = binary
        self.conf = Path(conf) if conf else DEFAULT_CONF
        self.env = {**os.environ, "CONTAINERS_CONF": str(self.conf)}

    def argv(self, *args: str) -> list[str]:
        """The full command line of a podman subcommand."""
        return [self.binary, *args]

    def call(self, *args: str, timeout: float = CALL_TIMEOUT_S) -> str:
        """Run a subcommand; its stdout, or PodmanError with podman's message."""
        try:
            done = subprocess.run(
                self.argv(*args), env=self.env, capture_output=True, text=True, timeout=timeout,
                stdin=subprocess.DEVNULL, check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            raise PodmanError(f"podman {args[0]}: {error}") from error
        if done.returncode != 0:
            lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
            raise PodmanError(lines[-1] if lines else f"podman {args[0]} exited with {done.returncode}")
        return done.stdout

    def version(self) -> str:
        """``podman 4.3.1``, or "" when podman is missing or does not work here."""
        if shutil.which(self.binary) is None:
            return ""
        try:
            return f"podman {self.call('version', '--format', '{{.Client.Version}}').strip()}"
        except PodmanError:
            return ""

    def image_exists(self, image: str) -> bool:
        """True when the image is in local storage."""
        try:
            self.call("image", "exists", image)
        except PodmanError:
            return False
        return True

    def pull(self, image: str) -> None:
        """Pull the image; PodmanError with podman's message when it cannot."""
        self.call("pull", "--quiet", image, timeout=PULL_TIMEOUT_S)

    def inspect(self, name: str) -> dict[str, Any] | None:
        """The container's ``State`` (Status, ExitCode, OOMKilled, Error…), or None when it does not exist."""
        try:
            out = self.call("container", "inspect", "--format", "{{json .State}}", name)
        except PodmanError:
            return None
        return json.loads(out)

    def kill(self, name: str, signum: int) -> bool:
        """Send a signal to the container's init process; False when it does not run (any more)."""
        try:
            self.call("kill", "--signal", str(signum), name)
        except PodmanError:
            return False
        return True

    def remove(self, name: str) -> None:
        """Remove the container (and its processes, if any); a missing one is not an error."""
        try:
            self.call("rm", "--force", "--ignore", "--time", "0", name)
        except PodmanError:
            pass

    def isolated_network(self, name: str) -> str:
        """The bridge network ``name``, created (``isolate``d from other networks, no DNS) when missing."""
        try:
            self.call("network", "exists", name)
        except PodmanError:
            try:
                self.call("network", "create", "--opt", "isolate=true", "--disable-dns", name)
            except PodmanError:
                self.call("network", "exists", name)  # another agent on this host made it meanwhile
        return name
