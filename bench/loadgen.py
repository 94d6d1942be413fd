"""The traffic of ``bench/load.py``: fake nodes (registered through the node API, each driven like a real agent:
heartbeating at the interval the portal tells it, long-polling for news, reporting the work it is given as started
and, a moment later, exited, its events batched) and API clients (submit, list; closed loop, or open loop at a
rate), each side spread over processes of its own.
In one process, the client threads of the full size would queue on that process's interpreter lock, and that
wait would be timed as the portal's latency. Figures come back per process and are merged.
"""

from __future__ import annotations

import http.client
import json
import multiprocessing
import random
import select
import threading
import time
import urllib.parse
from collections import defaultdict

import requests
from requests.structures import CaseInsensitiveDict

# ------------------------------------------------------------------------------------------------------
# HTTP: the little of ``requests.Session`` the traffic uses, over one keep-alive ``http.client`` connection.
# requests costs ~1.5 ms of CPU a request here; at the full size's ~500 requests a second that was most of a
# core taken from the portal on the same machine (real agents and users run elsewhere).


class Answer:
    def __init__(self, status_code: int, content: bytes, headers: CaseInsensitiveDict | None = None):
        # header names as sent (uvicorn's are lower case): looked up in any case, as requests does
        self.status_code, self.content, self.headers = status_code, content, headers or CaseInsensitiveDict()

    def json(self):
        return json.loads(self.content)

    def raise_for_status(self) -> None:
        if self.status_code >= 400:
            raise requests.HTTPError(f"HTTP {self.status_code}: {self.content[:200]!r}")


class Session:
    def __init__(self):
        self.headers: dict[str, str] = {}
        self._conns: dict[str, http.client.HTTPConnection] = {}  # one keep-alive connection per server

    def post(self, url: str, json=None, headers=None, timeout: float = 30) -> Answer:
        return self._request("POST", url, json, headers, timeout)

    def get(self, url: str, headers=None, timeout: float = 30) -> Answer:
        return self._request("GET", url, None, headers, timeout)

    def _request(self, method: str, url: str, body, headers, timeout: float) -> Answer:
        parts = urllib.parse.urlsplit(url)
        head = {**self.headers, **(headers or {})}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            head["Content-Type"] = "application/json"
        conn = self._conns.get(parts.netloc)
        if conn is not None and conn.sock is not None and select.select([conn.sock], [], [], 0)[0]:
            conn.close()  # readable while idle: the server closed it (keep-alive timeout); as urllib3 checks
            conn = None
        if conn is None:
            conn = self._conns[parts.netloc] = http.client.HTTPConnection(parts.netloc, timeout=timeout)
        elif conn.sock is not None:
            conn.sock.settimeout(timeout)
        try:
            conn.request(method, parts.path + (f"?{parts.query}" if parts.query else ""), body=data, headers=head)
            response = conn.getresponse()
            content = response.read()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            self._conns.pop(parts.netloc, None)
            raise requests.ConnectionError(f"{method} {parts.path}: {type(exc).__name__}: {exc}") from exc
        if response.will_close:
            conn.close()
            self._conns.pop(parts.netloc, None)
        return Answer(response.status, content, CaseInsensitiveDict(response.getheaders()))


# ------------------------------------------------------------------------------------------------------
# Fake nodes: registered through the node API, each driven like the real agent (scheduler/agent/loop.py): a
# thread of its own that heartbeats at the interval, reports what it is given and what ends in one batched
# request (POST /api/v1/node/events/, as scheduler/agent/outbox.py sends them) as soon as it happens, and, with
# the long-poll, a second thread asking POST /api/v1/node/wait/ for news (which brings the heartbeat forward).

MAX_EVENTS_PER_REQUEST = 256  # the portal's limit (scheduler/services/node_events.py)


class FakeNode:
    def __init__(self, name: str, token: str, gpus: int, interval: float = 2.0):
        self.name, self.gpus, self.seq = name, gpus, 0
        self.interval = interval  # the heartbeat interval: this until the portal names its own, as the agent does
        self.timeout: float | None = None
        self.headers = {"Authorization": f"Node {token}"}
        self.running: dict[tuple[int, int], float] = {}  # (job, attempt) -> when it "exits"
        self.done: set[tuple[int, int]] = set()
        self.outbox: list[dict] = []  # job events not yet sent, in order
        self.reports_not_before = 0.0  # time.monotonic(): the portal's bulk lane said to come back then (429)
        self.news = threading.Event()  # the long-poll heard that this node's assignments changed
        self.delivered: dict | None = None  # the assignments the long-poll brought, not yet applied
        self.delivered_lock = threading.Lock()
        self.as_of = ""  # the stamp of the newest answer applied (the portal's clock, ISO 8601, UTC)
        self.heartbeat_base = ""  # where the register answer said to heartbeat (``heartbeat_url``), else ``base``

    def register(self, base: str, session: Session) -> None:
        body = {"hostname": self.name, "agent_version": "load", "gpu_backend": "fake", "cpus": 64,
                "memory_mb": 512 * 1024,
                "gpus": [{"index": i, "uuid": f"GPU-{self.name}-{i}", "model": "h100-80gb", "memory_mb": 81559}
                         for i in range(self.gpus)]}
        answer = session.post(f"{base}/api/v1/node/register/", json=body, headers=self.headers, timeout=30)
        answer.raise_for_status()
        self.follow(answer.json())
        self.heartbeat_base = answer.json().get("heartbeat_url") or base  # the node-control server, as the agent

    def follow(self, answer: dict) -> None:
        """The interval and timeout of the portal's latest answer (scheduler/services/node_cadence.py)."""
        self.interval = float(answer.get("heartbeat_interval_s") or self.interval)
        self.timeout = float(answer.get("heartbeat_timeout_s") or self.timeout or 0) or None

    def beat(self, base: str, session: Session, duration: tuple[float, float], stats) -> None:
        """One heartbeat; its assignments queue the events a real agent would send (started, stopped)."""
        self.seq += 1
        started = time.perf_counter()
        answer = session.post(f"{self.heartbeat_base or base}/api/v1/node/heartbeat/", json={"seq": self.seq},
                              headers=self.headers, timeout=30)
        stats["heartbeat"].append((time.perf_counter() - started) * 1000)
        stats["heartbeat_timeline"].append((time.monotonic(), stats["heartbeat"][-1]))
        if answer.status_code == 409:
            self.register(base, session)
            return
        answer.raise_for_status()
        told = answer.json()
        self.follow(told)
        self.apply(told, duration)

    def take_delivery(self, duration: tuple[float, float]) -> bool:
        """Apply what the long-poll brought, if it brought assignments (else the node heartbeats for them)."""
        with self.delivered_lock:
            told, self.delivered = self.delivered, None
        if told is None:
            return False
        self.apply(told, duration)
        return True

    def apply(self, told: dict, duration: tuple[float, float]) -> None:
        """Act on an answer's assignments unless an answer read later was applied already (``as_of``)."""
        stamp = told.get("as_of") or ""
        if stamp and stamp <= self.as_of:  # one format and time zone: the strings order as the times do
            return
        self.as_of = stamp or self.as_of
        now = time.monotonic()
        listed = set()
        for item in told["assignments"]:
            key = (item["job_id"], item["attempt"])
            listed.add(key)
            if key in self.done or key in self.running:
                continue
            if item["desired"] == "stopped":
                self._queue(key, {"type": "stopped", "signal": 15})
            else:
                self._queue(key, {"type": "started", "pid": 1})
                self.running[key] = now + random.uniform(*duration)
        for key in [k for k in self.running if k not in listed]:  # taken away: the portal no longer asks
            self.running.pop(key)

    def exit_due(self, now: float) -> None:
        """Queue the exits of the jobs whose run time is over."""
        for key, until in list(self.running.items()):
            if until <= now:
                self._queue(key, {"type": "exited", "exit_code": 0})

    def next_exit(self) -> float:
        return min(self.running.values(), default=float("inf"))

    def next_flush(self) -> float:
        """When queued events may go: now, or when the portal's last Retry-After runs out."""
        return self.reports_not_before if self.outbox else float("inf")

    def _queue(self, key: tuple[int, int], event: dict) -> None:
        self.outbox.append({"job_id": key[0], "attempt": key[1], **event})
        if event["type"] != "started":
            self.running.pop(key, None)
            self.done.add(key)

    def flush(self, base: str, session: Session, stats) -> None:
        """Send the queued events, up to the portal's limit a request (one request for a pass's events); none
        before the portal's last ``Retry-After`` runs out, as the agent (scheduler/agent/client.py)."""
        while self.outbox and time.monotonic() >= self.reports_not_before:
            batch = self.outbox[:MAX_EVENTS_PER_REQUEST]
            started = time.perf_counter()
            response = session.post(f"{base}/api/v1/node/events/", json={"events": batch}, headers=self.headers,
                                    timeout=30)
            if response.status_code == 429:  # the bulk lane's queue is full (portal/priority.py): come back later
                stats["event_busy"].append((time.perf_counter() - started) * 1000)
                told = float(response.headers.get("Retry-After") or 1)
                stats["event_busy_retry_after"].append(told)
                wait = told * random.uniform(1.0, 1.25)
                self.reports_not_before = time.monotonic() + wait
                return
            stats["event"].append((time.perf_counter() - started) * 1000)
            if response.status_code == 409:  # the portal asks this node to register again: it resends later
                self.register(base, session)
                return
            response.raise_for_status()
            stats["events_sent"].append(len(batch))
            for event, result in zip(batch, response.json()["results"], strict=True):
                key = (event["job_id"], event["attempt"])
                if "status" in result and event["type"] == "started":  # refused: it never runs here
                    self.running.pop(key, None)
                    self.done.add(key)
            del self.outbox[:len(batch)]

    def wait(self, base: str, session: Session, stats) -> bool:
        """One long-poll, held up to this node's interval; True when it brought news."""
        interval = self.interval
        answer = session.post(f"{base}/api/v1/node/wait/", json={"timeout_s": interval, "assignments": True},
                              headers=self.headers, timeout=interval + 30).json()
        stats["wait_" + ("news" if answer.get("news") else "held" if answer.get("waited") else "refused")].append(1)
        if answer.get("news"):
            if "assignments" in answer:
                stats["wait_delivered"].append(1)
                with self.delivered_lock:
                    self.delivered = answer
            self.news.set()
            return True
        return False


def run_nodes(nodes: list[FakeNode], base: str, long_poll: bool, duration, stop: threading.Event,
              stats, go=None) -> list[threading.Thread]:
    """A thread per node (and one more per node for the long-poll), as each real agent has its own. Each node
    heartbeats at the interval of the portal's latest answer (``node.interval`` until then). With ``go`` (an
    event), the threads are started but send nothing until it is set."""
    def agent(node: FakeNode) -> None:
        session = Session()
        if go is not None:
            go.wait()
        for _ in range(10):
            try:
                node.register(base, session)
                break
            except requests.RequestException as exc:
                stats["node_errors"].append(str(exc)[:200])
                stop.wait(1)
        next_beat, spread = time.monotonic(), True  # as the agent: a beat at once, the next at a random phase
        while not stop.is_set():
            now = time.monotonic()
            try:
                news = node.news.is_set()
                if news:  # cleared only when seen: news set after the look waits for the next pass
                    node.news.clear()
                if now >= next_beat or (news and not node.take_delivery(duration)):
                    node.beat(base, session, duration, stats)
                    next_beat = now + node.interval * (random.random() if spread else 1.0)
                    spread = False
                node.exit_due(time.monotonic())
                node.flush(base, session, stats)
            except requests.RequestException as exc:
                stats["node_errors"].append(str(exc)[:200])
            node.news.wait(max(0.0, min(next_beat, node.next_exit(), node.next_flush()) - time.monotonic()))

    def listen(node: FakeNode) -> None:
        session = Session()
        if go is not None:
            go.wait()
        stop.wait(random.uniform(0, node.interval))
        while not stop.is_set():
            asked = time.monotonic()
            try:
                if node.wait(base, session, stats):
                    continue
            except (requests.RequestException, ValueError) as exc:
                stats["node_errors"].append(f"wait: {str(exc)[:200]}")
            stop.wait(max(0.0, asked + node.interval - time.monotonic()))

    pool = [threading.Thread(target=agent, args=(node,), daemon=True) for node in nodes]
    if long_poll:
        pool += [threading.Thread(target=listen, args=(node,), daemon=True) for node in nodes]
    for thread in pool:
        thread.start()
    return pool


# ------------------------------------------------------------------------------------------------------
# API clients: submit and list in turn, over one keep-alive connection each. Closed loop (``rate`` 0): each
# sends its next request as soon as the last is answered, a saturation test (by Little's law the latency is
# clients / throughput). Open loop (``rate`` > 0): each sends ``rate`` requests a second (Poisson or evenly spaced
# arrivals), as users do, and a request's latency runs from when it was due to be sent, so a stalled server
# cannot hide the requests it held back (coordinated omission).


def _client_schedule(rate: float, count: int, arrivals: str, rng: random.Random) -> list[float]:
    """When each of ``count`` requests is due, seconds from the client's start (open loop); all at 0: closed."""
    if rate <= 0:
        return [0.0] * count
    due, at = [], rng.uniform(0, 1 / rate)  # the clients do not all start in the same instant
    for _ in range(count):
        due.append(at)
        at += rng.expovariate(rate) if arrivals == "poisson" else 1 / rate
    return due


def run_clients(base: str, tokens: list[str], clients: list[int], requests_each: int, stats, rate: float = 0.0,
                arrivals: str = "poisson", ready=None, go=None) -> None:
    """Clients number ``clients`` (each uses token ``i % len(tokens)``), all at once; each sends
    ``requests_each`` requests, submits and lists in turn, closed-loop (``rate`` 0) or ``rate`` a second. With
    ``go`` (an event), the clients' threads are started, then ``ready()`` called, and they wait for it."""
    def client(i: int) -> None:
        session = Session()
        session.headers["Authorization"] = f"Token {tokens[i % len(tokens)]}"
        if go is not None:
            go.wait()
        start = time.perf_counter()
        for n, due in enumerate(_client_schedule(rate, requests_each, arrivals, random.Random(i))):
            late = start + due - time.perf_counter()
            if late > 0:
                time.sleep(late)
            sent = time.perf_counter()
            intended = start + due if rate > 0 else sent
            kind = "submit" if n % 2 == 0 else "list"
            try:
                if kind == "submit":
                    response = session.post(f"{base}/api/v1/jobs/", json={
                        "name": f"c{i}-{n}", "command": "true", "gpu_model": "h100-80gb", "gpus": 1}, timeout=60)
                else:
                    response = session.get(f"{base}/api/v1/jobs/?limit=50", timeout=60)
            except requests.RequestException as exc:  # an overloaded server resets connections: count it
                stats["api_errors"].append(f"{kind} {type(exc).__name__}")
                continue
            done = time.perf_counter()
            stats[kind].append((done - intended) * 1000)
            stats[kind + "_service"].append((done - sent) * 1000)  # from the actual send: what coordinated
            stats[kind + "_timeline"].append((time.monotonic(), (done - sent) * 1000))  # (CLOCK_MONOTONIC, ms)
            if response.status_code not in (200, 201):              # omission would report
                stats["api_errors"].append(f"{kind} {response.status_code}")

    pool = [threading.Thread(target=client, args=(i,)) for i in clients]
    for thread in pool:
        thread.start()
    if ready is not None:
        ready()
    for thread in pool:
        thread.join()


# ------------------------------------------------------------------------------------------------------
# Processes: each runs its share of the nodes or clients and sends its figures back.


def _nodes_process(nodes: list[tuple[str, str]], base: str, gpus: int, interval: float, long_poll: bool, duration,
                   ready, go, stop, out) -> None:
    stats: dict[str, list] = defaultdict(list)
    local_stop = threading.Event()
    fake = [FakeNode(name, token, gpus, interval) for name, token in nodes]
    pool = run_nodes(fake, base, long_poll, duration, local_stop, stats, go=go)
    ready.put("nodes")
    stop.wait()
    local_stop.set()
    for node in fake:
        node.news.set()
    for thread in pool:
        thread.join(35)
    stats["interval_told"] = [node.interval for node in fake]  # the portal's last word to each node
    stats["timeout_told"] = [node.timeout for node in fake if node.timeout]
    stats["loadgen_cpu_s"].append(time.process_time())  # what simulating the nodes cost this machine
    out.put(dict(stats))


def _clients_process(base: str, tokens: list[str], clients: list[int], requests_each: int, rate: float,
                     arrivals: str, ready, go, out) -> None:
    stats: dict[str, list] = defaultdict(list)
    started = []

    def set_off() -> None:  # the threads are started: tell the parent, and time the run from its signal
        ready.put("clients")
        go.wait()
        started.append(time.monotonic())  # CLOCK_MONOTONIC: one clock for every process of the machine

    run_clients(base, tokens, clients, requests_each, stats, rate, arrivals, ready=set_off, go=go)
    stats["loadgen_cpu_s"].append(time.process_time())
    out.put({**stats, "span": [started[0], time.monotonic()]})


class Traffic:
    """Fake nodes over ``node_procs`` processes (a thread per node, and one more per node for the long-poll)
    and API clients over ``client_procs`` processes. ``prepare`` starts them all and waits until each has
    started its threads, which then wait (a new interpreter's imports and a thousand threads' start are the load
    generator's own cost, not the portal's: they took a core from the servers in the run's first seconds);
    ``go`` lets them send, nodes and clients at one instant."""

    def __init__(self, base: str, args, node_base: str | None = None):
        self.base, self.args = base, args
        self.node_base = node_base or base
        self.ctx = multiprocessing.get_context("spawn")  # fresh interpreters: no Django, no open connections
        self.stop_nodes = self.ctx.Event()
        self.started = self.ctx.Event()
        self.ready = self.ctx.Queue()
        self.out = self.ctx.Queue()
        self.node_procs: list = []
        self.client_procs: list = []

    def prepare(self, nodes: list[tuple[str, str]], tokens: list[str], timeout_s: float = 120.0) -> None:
        """Start every node and client process; return once each is ready to send."""
        a = self.args
        for p in range(min(a.node_procs, len(nodes)) if nodes else 0):
            self.node_procs.append(self.ctx.Process(target=_nodes_process, daemon=True, args=(
                nodes[p::a.node_procs], self.node_base, a.gpus_per_node, a.interval, a.long_poll,
                tuple(a.job_seconds), self.ready, self.started, self.stop_nodes, self.out)))
        self.client_procs = [self.ctx.Process(target=_clients_process, daemon=True, args=(
            self.base, tokens, list(range(p, a.clients, a.client_procs)), a.requests, a.client_rate, a.arrivals,
            self.ready, self.started, self.out))
            for p in range(min(a.client_procs, a.clients))]
        for proc in self.node_procs + self.client_procs:
            proc.start()
        for _proc in self.node_procs + self.client_procs:
            self.ready.get(timeout=timeout_s)

    def go(self) -> None:
        self.started.set()

    def run_clients(self, stats: dict) -> float:
        """Wait for every client's requests; returns the seconds from the first to the last."""
        spans = []
        for _proc in self.client_procs:
            part = self.out.get()
            spans.append(part.pop("span"))
            _merge(stats, part)
        for proc in self.client_procs:
            proc.join()
        return max(end for _start, end in spans) - min(start for start, _end in spans)

    def stop(self, stats: dict) -> None:
        self.stop_nodes.set()
        for _proc in self.node_procs:
            _merge(stats, self.out.get(timeout=60))
        for proc in self.node_procs:
            proc.join(10)


def _merge(stats: dict, part: dict) -> None:
    for key, values in part.items():
        stats[key].extend(values)
