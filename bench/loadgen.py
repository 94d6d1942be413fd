"""The traffic of ``bench/load.py``: fake nodes (registered through the node API, heartbeating, reporting the work
they are given as started and, a moment later, exited) and API clients (submit, list), each side spread over
processes of its own. In one process, the ~60 threads of the full size queue on that process's interpreter lock,
and that wait would be timed as the portal's latency: a process per ~25 threads keeps the figures the server's.
Figures come back per process and are merged.
"""

from __future__ import annotations

import multiprocessing
import random
import threading
import time
from collections import defaultdict

import requests

# ------------------------------------------------------------------------------------------------------
# Fake nodes: registered through the node API, heartbeating from a pool of threads.


class FakeNode:
    def __init__(self, name: str, token: str, gpus: int):
        self.name, self.gpus, self.seq = name, gpus, 0
        self.headers = {"Authorization": f"Node {token}"}
        self.running: dict[tuple[int, int], float] = {}  # (job, attempt) -> when it "exits"
        self.done: set[tuple[int, int]] = set()

    def register(self, base: str, session: requests.Session) -> None:
        body = {"hostname": self.name, "agent_version": "load", "gpu_backend": "fake", "cpus": 64,
                "memory_mb": 512 * 1024,
                "gpus": [{"index": i, "uuid": f"GPU-{self.name}-{i}", "model": "h100-80gb", "memory_mb": 81559}
                         for i in range(self.gpus)]}
        session.post(f"{base}/api/v1/node/register/", json=body, headers=self.headers, timeout=30).raise_for_status()

    def beat(self, base: str, session: requests.Session, duration: tuple[float, float], stats) -> None:
        self.seq += 1
        started = time.perf_counter()
        answer = session.post(f"{base}/api/v1/node/heartbeat/", json={"seq": self.seq}, headers=self.headers,
                              timeout=30)
        stats["heartbeat"].append((time.perf_counter() - started) * 1000)
        if answer.status_code == 409:
            self.register(base, session)
            return
        answer.raise_for_status()
        now = time.monotonic()
        listed = set()
        for item in answer.json()["assignments"]:
            key = (item["job_id"], item["attempt"])
            listed.add(key)
            if key in self.done:
                continue
            if item["desired"] == "stopped":
                self._event(base, session, key, {"type": "stopped", "signal": 15}, stats)
            elif key not in self.running:
                self._event(base, session, key, {"type": "started", "pid": 1}, stats)
                self.running[key] = now + random.uniform(*duration)
        for key, until in list(self.running.items()):
            if key not in listed:
                self.running.pop(key)
            elif until <= now:
                self._event(base, session, key, {"type": "exited", "exit_code": 0}, stats)

    def _event(self, base, session, key, event, stats) -> None:
        started = time.perf_counter()
        response = session.post(f"{base}/api/v1/node/jobs/{key[0]}/events/", json={"attempt": key[1], **event},
                                headers=self.headers, timeout=30)
        stats["event"].append((time.perf_counter() - started) * 1000)
        if event["type"] != "started" or response.status_code >= 400:
            self.running.pop(key, None)
            self.done.add(key)


def run_nodes(nodes: list[FakeNode], base: str, interval: float, threads: int, duration, stop: threading.Event,
              stats) -> list[threading.Thread]:
    def worker(mine: list[FakeNode]) -> None:
        session = requests.Session()
        for node in mine:
            for _ in range(10):
                try:
                    node.register(base, session)
                    break
                except requests.RequestException as exc:
                    stats["node_errors"].append(str(exc)[:200])
                    time.sleep(1)
        while not stop.is_set():
            round_started = time.monotonic()
            for node in mine:
                if stop.is_set():
                    return
                try:
                    node.beat(base, session, duration, stats)
                except requests.RequestException as exc:
                    stats["node_errors"].append(str(exc)[:200])
            stop.wait(max(0.0, interval - (time.monotonic() - round_started)))

    pool = [threading.Thread(target=worker, args=(nodes[i::threads],), daemon=True) for i in range(threads)]
    for thread in pool:
        thread.start()
    return pool


# ------------------------------------------------------------------------------------------------------
# API clients: submit and list, over one keep-alive connection each.


def run_clients(base: str, tokens: list[str], clients: list[int], requests_each: int, stats) -> None:
    """Clients number ``clients`` (each uses token ``i % len(tokens)``), all at once; each sends
    ``requests_each`` requests, submits and lists in turn."""
    def client(i: int) -> None:
        session = requests.Session()
        session.headers["Authorization"] = f"Token {tokens[i % len(tokens)]}"
        for n in range(requests_each):
            started = time.perf_counter()
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
            stats[kind].append((time.perf_counter() - started) * 1000)
            if response.status_code not in (200, 201):
                stats["api_errors"].append(f"{kind} {response.status_code}")

    pool = [threading.Thread(target=client, args=(i,)) for i in clients]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()


# ------------------------------------------------------------------------------------------------------
# Processes: each runs its share of the nodes or clients and sends its figures back.


def _nodes_process(nodes: list[tuple[str, str]], base: str, gpus: int, interval: float, threads: int, duration,
                   stop, out) -> None:
    stats: dict[str, list] = defaultdict(list)
    local_stop = threading.Event()
    pool = run_nodes([FakeNode(name, token, gpus) for name, token in nodes], base, interval, threads,
                     duration, local_stop, stats)
    stop.wait()
    local_stop.set()
    for thread in pool:
        thread.join(35)
    out.put(dict(stats))


def _clients_process(base: str, tokens: list[str], clients: list[int], requests_each: int, go, out) -> None:
    stats: dict[str, list] = defaultdict(list)
    go.wait()
    started = time.monotonic()  # CLOCK_MONOTONIC: one clock for every process of the machine
    run_clients(base, tokens, clients, requests_each, stats)
    out.put({**stats, "span": [started, time.monotonic()]})


class Traffic:
    """Fake nodes over ``node_procs`` processes (``node_threads`` threads each) and API clients over
    ``client_procs`` processes."""

    def __init__(self, base: str, args):
        self.base, self.args = base, args
        self.ctx = multiprocessing.get_context("spawn")  # fresh interpreters: no Django, no open connections
        self.stop_nodes = self.ctx.Event()
        self.out = self.ctx.Queue()
        self.node_procs: list = []

    def start_nodes(self, nodes: list[tuple[str, str]]) -> None:
        a = self.args
        for p in range(min(a.node_procs, len(nodes)) if nodes else 0):
            proc = self.ctx.Process(target=_nodes_process, daemon=True, args=(
                nodes[p::a.node_procs], self.base, a.gpus_per_node, a.interval, a.node_threads,
                tuple(a.job_seconds), self.stop_nodes, self.out))
            proc.start()
            self.node_procs.append(proc)

    def run_clients(self, tokens: list[str], stats: dict) -> float:
        """Every client's requests, all clients at once; returns the seconds from the first to the last."""
        a = self.args
        go = self.ctx.Event()
        procs = [self.ctx.Process(target=_clients_process, daemon=True, args=(
            self.base, tokens, list(range(p, a.clients, a.client_procs)), a.requests, go, self.out))
            for p in range(min(a.client_procs, a.clients))]
        for proc in procs:
            proc.start()
        go.set()
        spans = []
        for _proc in procs:
            part = self.out.get()
            spans.append(part.pop("span"))
            _merge(stats, part)
        for proc in procs:
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
