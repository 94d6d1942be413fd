"""A tiny in-process portal that speaks docs/node-protocol.md, for the agent's tests.

It keeps everything in memory: the assignments a test sets, and the registrations, heartbeats, events
and log chunks the agent sends. ``down`` makes it answer 503; ``require_register`` makes the next
heartbeat answer 409 {"detail": "register"}. ``notify()`` is news for the node's long-poll, which then brings
the assignments with it when the agent asks for them (``deliver``: False answers the news alone).
"""

from __future__ import annotations

import datetime as dt
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOKEN = "node-secret"


class StandInPortal:
    """Start with ``start()``, point an agent at ``url``, ``stop()`` at the end."""

    def __init__(self, *, interval_s: float = 0.1, timeout_s: float = 30.0) -> None:
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.lock = threading.Lock()
        self.assignments: dict[int, dict[str, Any]] = {}
        self.registrations: list[dict[str, Any]] = []
        self.heartbeats: list[dict[str, Any]] = []
        self.events: list[tuple[int, dict[str, Any]]] = []
        self.logs: dict[tuple[int, int], bytes] = {}
        self.down = False
        self.require_register = False
        self.refuse_heartbeats: list[tuple[int, dict[str, Any]]] = []  # answered in order, then accepted
        self.refuse_jobs: dict[int, tuple[int, dict[str, Any]]] = {}  # job id -> the answer to its reports
        self.refused: list[tuple[int, str, dict[str, Any]]] = []  # (job id, "events" or "log", body)
        self.last_seq = 0
        self.batch_events = True  # False: a portal without POST /api/v1/node/events/ (answers 404)
        self.batches: list[int] = []  # the number of events in each batch request
        self.busy: list[int] = []  # the next batch requests are answered 429 with these Retry-After seconds
        self.batch_posts: list[float] = []  # time.monotonic() of each batch request, the busy ones' included
        self.token = TOKEN  # the one node token it accepts (a test rotates it)
        self.news = threading.Event()  # set by notify(): the held long-poll answers
        self.deliver = True  # a long-poll that asks for the assignments gets them with the news
        self.deliveries: list[dict[str, Any]] = []  # the answers that brought assignments
        self.heartbeat_url = ""  # named in register and heartbeat answers: the node-control server
        self.heartbeat_answers: list[tuple[int, int | None]] = []  # next heartbeats' (status, Retry-After)
        self._as_of = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        """The portal root."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> StandInPortal:
        """Serve in a background thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()

    def assign(self, job_id: int, command: str, **fields: Any) -> None:
        """Make the job part of every heartbeat answer from now on."""
        with self.lock:
            self.assignments[job_id] = {
                "job_id": job_id,
                "attempt": 1,
                "desired": "running",
                "command": command,
                "env": {"ROTA_JOB_ID": str(job_id)},
                "gpus": [],
                "time_limit_s": None,
                "grace_period_s": 1,
                "kind": "training",
                **fields,
            }

    def unassign(self, job_id: int) -> None:
        """Drop the job from the heartbeat answers."""
        with self.lock:
            self.assignments.pop(job_id, None)

    def notify(self) -> None:
        """News for the node: its held long-poll (or its next one) answers at once."""
        self.news.set()

    def stamp(self) -> str:
        """The next ``as_of`` (under the lock): later than every one given before."""
        self._as_of = max(self._as_of + dt.timedelta(microseconds=1), dt.datetime.now(dt.UTC))
        return self._as_of.isoformat(timespec="microseconds")

    def events_of(self, job_id: int, kind: str | None = None) -> list[dict[str, Any]]:
        """The events received for a job (of one type if given)."""
        with self.lock:
            return [body for jid, body in self.events if jid == job_id and kind in (None, body["type"])]

    def log_text(self, job_id: int, attempt: int = 1) -> str:
        """The log the portal holds for an attempt."""
        with self.lock:
            return self.logs.get((job_id, attempt), b"").decode()

    def handle(self, path: str, headers: Any, body: dict[str, Any]) -> tuple[int, dict[str, Any], dict]:
        """Answer one request as the real portal would: its status, body and extra headers."""
        if path == "/api/v1/node/wait/" and headers.get("Authorization") == f"Node {self.token}":
            return 200, self._wait(body), {}
        with self.lock:
            if path == "/api/v1/node/events/" and self.batch_events:
                self.batch_posts.append(time.monotonic())
                if self.busy:  # the portal's bulk lane is full (portal/priority.py)
                    return 429, {"detail": "busy"}, {"Retry-After": str(self.busy.pop(0))}
            if path == "/api/v1/node/heartbeat/" and self.heartbeat_answers:  # failures, in order
                status, retry_after = self.heartbeat_answers.pop(0)
                return status, {"detail": "busy"}, ({"Retry-After": str(retry_after)} if retry_after else {})
        return (*self._handle(path, headers, body), {})

    def _handle(self, path: str, headers: Any, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if headers.get("Authorization") != f"Node {self.token}":
            return 401, {"detail": "unknown or revoked node token"}
        if self.down:
            return 503, {"detail": "down"}
        with self.lock:
            if path == "/api/v1/node/register/":
                self.registrations.append(body)
                self.require_register, self.last_seq = False, 0
                return 200, {
                    "node": body["hostname"],
                    "heartbeat_interval_s": self.interval_s,
                    "heartbeat_timeout_s": self.timeout_s,
                    **({"heartbeat_url": self.heartbeat_url} if self.heartbeat_url else {}),
                }
            if path == "/api/v1/node/heartbeat/":
                if self.require_register:
                    return 409, {"detail": "register"}
                if self.refuse_heartbeats:
                    return self.refuse_heartbeats.pop(0)
                if body["seq"] <= self.last_seq:
                    return 409, {"detail": "seq is not newer", "field": "seq"}
                self.last_seq = body["seq"]
                self.heartbeats.append(body)
                return 200, {
                    "heartbeat_interval_s": self.interval_s,
                    "heartbeat_timeout_s": self.timeout_s,
                    **({"heartbeat_url": self.heartbeat_url} if self.heartbeat_url else {}),
                    "as_of": self.stamp(),
                    "assignments": [dict(a) for a in self.assignments.values()],
                }
            if path == "/api/v1/node/events/" and self.batch_events:
                self.batches.append(len(body["events"]))
                return 200, {"results": [self._event(event.pop("job_id"), event) for event in body["events"]]}
            match = re.fullmatch(r"/api/v1/node/jobs/(\d+)/(events|log)/", path)
            if match is None:
                return 404, {"detail": "not found"}
            job_id = int(match.group(1))
            if job_id in self.refuse_jobs and match.group(2) == "log":
                self.refused.append((job_id, "log", body))
                return self.refuse_jobs[job_id]
            if match.group(2) == "events":
                answer = self._event(job_id, body)
                return answer.get("status", 200), answer
            stored = self.logs.get((job_id, body["attempt"]), b"")
            if body["offset"] > len(stored):
                return 409, {"detail": "offset past the stored size", "field": "offset"}
            chunk = body["data"].encode()
            self.logs[(job_id, body["attempt"])] = stored + chunk[len(stored) - body["offset"] :]
            return 200, {"size": len(self.logs[(job_id, body["attempt"])])}


    def _wait(self, body: dict[str, Any]) -> dict[str, Any]:
        """A long-poll: held until ``notify()`` or its timeout (at most the interval), without the lock."""
        news = self.news.wait(min(float(body.get("timeout_s", self.interval_s)), self.interval_s))
        self.news.clear()
        answer: dict[str, Any] = {"news": news, "waited": True}
        if news and body.get("assignments") and self.deliver:
            with self.lock:
                answer.update(as_of=self.stamp(), assignments=[dict(a) for a in self.assignments.values()])
                self.deliveries.append(answer)
        return answer

    def _event(self, job_id: int, body: dict[str, Any]) -> dict[str, Any]:
        """One job event (under the lock): recorded, or refused as ``refuse_jobs`` says."""
        if job_id in self.refuse_jobs:
            self.refused.append((job_id, "events", body))
            status, answer = self.refuse_jobs[job_id]
            return {"job_id": job_id, "status": status, **answer}
        self.events.append((job_id, body))
        return {"job_id": job_id}


def _handler_for(portal: StandInPortal) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            status, answer, extra = portal.handle(self.path, self.headers, body)
            data = json.dumps(answer).encode()
            self.send_response(status)
            for name, value in extra.items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            """Quiet."""

    return Handler
