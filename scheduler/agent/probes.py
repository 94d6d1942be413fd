"""Health probes of the services this node runs, like a kubelet's liveness probe.

A listening job (its assignment names a ``port``) whose environment names ``ROTA_HEALTH_PATH`` is probed
with ``GET http://<service address>:<port><path>`` every ``period_s`` from a thread of its own, so a slow
replica never holds up the heartbeats. A 2xx or 3xx answer within ``timeout_s`` is a success; anything else
(refused, timed out, another status) a failure. Each attempt's health, as the heartbeat reports it:

* ``starting``: no probe has succeeded yet; failures then count only after ``start_grace_s``;
* ``healthy``: the last probe succeeded;
* ``unhealthy``: the last probe failed (the portal's gateway sends it no traffic).

After ``failure_threshold`` failures in a row the agent stops the attempt (cause ``unhealthy``) and reports
it ``exited`` with reason ``Unhealthy``; the portal restarts the replica (``docs/gateway.md``).
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

from scheduler.agent.executors import Executor
from scheduler.agent.jobs import STOP_UNHEALTHY, Assignment, job_key

log = logging.getLogger(__name__)
STARTING, HEALTHY, UNHEALTHY = "starting", "healthy", "unhealthy"


@dataclass(frozen=True, slots=True)
class ProbeSettings:
    """How often and how patiently to probe. Seconds."""

    period_s: float = 2.0
    timeout_s: float = 2.0
    failure_threshold: int = 3
    start_grace_s: float = 60.0


@dataclass(slots=True)
class _Target:
    url: str
    since: float  # when the agent began probing the attempt (monotonic)
    health: str = STARTING
    failures: int = 0
    message: str = ""
    next_at: float = 0.0


def probe_once(url: str, timeout_s: float) -> str:
    """One probe: "" on success, else what went wrong (for the job's page)."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="GET"), timeout=timeout_s) as answer:
            status = answer.status
    except urllib.error.HTTPError as error:
        status = error.code
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        return f"{reason.__class__.__name__}: {reason}" if isinstance(reason, BaseException) else str(reason)
    return "" if 200 <= status < 400 else f"answered HTTP {status}"


class HealthProbes:
    """The probes of this node's listening jobs, keyed by attempt (``"<job_id>:<attempt>"``)."""

    def __init__(
        self,
        service_address: str | None,
        settings: ProbeSettings | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        probe: Callable[[str, float], str] = probe_once,
    ) -> None:
        """``service_address`` is the host the node's services listen on (127.0.0.1 when none is given)."""
        self.host = service_address or "127.0.0.1"
        self.settings = settings or ProbeSettings()
        self._clock = clock
        self._probe = probe
        self._targets: dict[str, _Target] = {}
        self._lock = threading.Lock()

    @staticmethod
    def path_of(assignment: Assignment) -> str | None:
        """The path to probe: ``ROTA_HEALTH_PATH`` of a job that listens, when it is an absolute path."""
        path = assignment.env.get("ROTA_HEALTH_PATH", "").strip()
        if not assignment.port or not path.startswith("/"):
            return None
        return path

    def watch(self, assignment: Assignment) -> None:
        """Probe this attempt (again listed by the portal: nothing changes if it is already watched)."""
        path = self.path_of(assignment)
        if path is None:
            return
        with self._lock:
            if assignment.key not in self._targets:
                url = f"http://{self.host}:{assignment.port}{path}"
                self._targets[assignment.key] = _Target(url=url, since=self._clock())

    def keep_only(self, keys: set[str]) -> None:
        """Forget the attempts that no longer run here."""
        with self._lock:
            for key in set(self._targets) - keys:
                del self._targets[key]

    def health(self, key: str) -> tuple[str, str] | None:
        """(health, message) of a watched attempt, or None when it is not probed."""
        with self._lock:
            target = self._targets.get(key)
            return (target.health, target.message) if target else None

    def failed(self) -> list[tuple[str, str]]:
        """The attempts past the failure threshold, with why; each is named once (then forgotten)."""
        with self._lock:
            over = [(key, f"{t.message} ({t.failures} times in a row)") for key, t in self._targets.items()
                    if t.failures >= self.settings.failure_threshold]
            for key, _ in over:
                del self._targets[key]
        return over

    def heal(self, executor: Executor) -> None:
        """Stop the attempts past the failure threshold (reported ``exited``, reason ``Unhealthy``)."""
        self.keep_only(set(executor.jobs))
        for key, message in self.failed():
            executor.stop(key, STOP_UNHEALTHY, message)

    def annotate(self, running: list[dict[str, object]]) -> list[dict[str, object]]:
        """The heartbeat's ``running`` entries, with ``health`` and ``health_message`` where probed."""
        for entry in running:
            health = self.health(job_key(int(entry["job_id"]), int(entry["attempt"])))  # type: ignore[call-overload]
            if health is not None:
                entry["health"], entry["health_message"] = health[0], health[1][:300]
        return running

    def run_due(self) -> None:
        """Probe every attempt whose period is up (the network calls run outside the lock)."""
        now = self._clock()
        with self._lock:
            due = [(key, t.url) for key, t in self._targets.items() if t.next_at <= now]
            for key, _ in due:
                self._targets[key].next_at = now + self.settings.period_s
        for key, url in due:
            problem = self._probe(url, self.settings.timeout_s)
            self._record(key, url, problem)

    def _record(self, key: str, url: str, problem: str) -> None:
        with self._lock:
            target = self._targets.get(key)
            if target is None:
                return
            if not problem:
                target.health, target.failures, target.message = HEALTHY, 0, ""
                return
            path = url.split("/", 3)[-1]
            target.message = f"health probe GET /{path} failed: {problem}"
            if target.health == STARTING and self._clock() - target.since < self.settings.start_grace_s:
                return  # still starting: its first answers may not be there yet
            target.health = UNHEALTHY
            target.failures += 1
            if target.failures == self.settings.failure_threshold:
                log.warning("job %s: %s (%d times in a row)", key, target.message, target.failures)

    def loop(self, stop: threading.Event) -> None:
        """The probing thread: probe what is due until ``stop`` is set."""
        while not stop.is_set():
            try:
                self.run_due()
            except Exception:  # a probe must never end the thread
                log.exception("health probes failed")
            stop.wait(min(0.5, self.settings.period_s / 2))
