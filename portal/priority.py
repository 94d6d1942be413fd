"""Which requests wait for which in a web process (``portal/asgi.py``): Kubernetes' API Priority and Fairness cut
to three lanes, each with threads of its own and its own queue, so no request queues behind bulk traffic, and a
node's heartbeat queues behind no other node request.

**Bulk** is the nodes' reports of work done: job events (``POST /api/v1/node/events/``, the batch, and the
single event's endpoint), log chunks and Slurm accounting records. They come in at the drain's pace (at the
full size ~80 a second, most of the portal's CPU), a node sends its next only when the last is answered, and
they may wait: a job's state is already on the node, the agent keeps its events until they are answered, and
the cycle places work from what it has. **Node** is the rest of the nodes' requests but their heartbeats: a
register and a long-poll's check, and the delivery of the assignments a long-poll brings with its news
(``portal/longpoll.py``). They come in herds (a fleet restarting registers at once; a cycle that places thousands
of jobs sends news to hundreds of nodes at once) and a node that waits for one only waits longer for its work.
Everything else is **interactive**: users' pages and API, and the nodes' heartbeats, whose delay marks a node
down: at the full size on 2 cores, heartbeats that took delivery of work in the same lane as registers waited up to
22 s at the cold start (p99), 1.4-2.7 s once deliveries came with the news in a lane of their own
(bench/README.md, "Work delivered with the news"). Lanes share a process's interpreter lock, though: where a site
runs a node-control server (``ROTA_WEB_ROLE=control``, deploy/gunicorn.conf.py), the heartbeats go there and
queue behind no report at all.

Each lane runs at most its number of requests at once, in its own threads (``ROTA_WEB_THREADS`` interactive,
``ROTA_WEB_NODE_THREADS`` node, default 4, ``ROTA_WEB_BULK_THREADS`` bulk, each thread with its own database
connection); the rest wait on the event loop in the order they came (the node lane's without a bound: a register
or a delivery is never refused). So while bulk requests are queued an interactive request starts at once, and bulk
gets its own threads' share whatever the interactive load (it is never starved). Bulk's threads are fewer than the
interactive ones: in one process they share the interpreter's lock, so each busy bulk thread slows an interactive
request running beside it, and the queue is where bulk waits. 2 by default: at the full size on 2 cores, 2 bulk
threads (against 6) drained faster (105 s against 114.5), answered users in 272 ms at the median (472) and
heartbeats in 617 ms (2,294), now that a batch of events is one transaction and a full queue answers 429
(bench/README.md, "Rota beside Slurm, and the full size, on a quiet box with this morning's work merged"; 6 had
been chosen while 2 left reports waiting past a node's timeout, before the queue was bounded).

A request whose client hangs up while it waits is not run at all: an agent that gave up on an answer
(``scheduler/agent/client.py``'s timeout) sends the same events again, and the stale copy would only take
the place of the fresh one.

Bulk's queue is bounded (``ROTA_WEB_BULK_QUEUE`` waiting requests per process): past it a report is answered
**429** at once, with ``Retry-After`` the seconds the queue ahead of it takes to clear (its depth times a bulk
request's recent time in a thread, over the threads), and the agent keeps its events and sends them after
that. Without the bound, a saturated portal queued reports past the agent's 10 s timeout (median wait 10-13 s
at the full size): the agent gave up and sent the same events again into the same queue. The default, 8 per
bulk thread (16 at the default 2 threads), is what the threads clear well inside that timeout at the saturated
full size: a worker process answered ~8 batches a second there with 6 threads (~25 a second in 3 workers,
bench/README.md "The full size with two lanes"), so 48 queued waited ~6 s and the request's own time (~1 s under
that load) still fitted the 10 s; fewer threads clear fewer, and queue fewer."""

import asyncio
import json
import logging
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from django.db import connection
from django.urls import Resolver404, resolve

from portal.env import env_int

log = logging.getLogger(__name__)
INTERACTIVE, NODE, BULK = "interactive", "node", "bulk"
# The lanes a server of each role (ROTA_WEB_ROLE, deploy/gunicorn.conf.py) mostly serves, whose threads its workers
# start warm (``Lane.warm``): users' server its interactive lane, the nodes' their node and bulk lanes, the
# node-control server its interactive lane (the heartbeats).
ROLE_LANES = {"web": (INTERACTIVE,), "nodes": (NODE, BULK), "control": (INTERACTIVE,)}
BULK_ROUTES = frozenset({"node-job-events", "node-job-event", "node-job-log", "node-slurm-accounting"})
NODE_ROUTES = frozenset({"node-register", "node-wait"})
NODE_PREFIX = "/api/v1/node/"  # every bulk and node route is under it: other paths are not resolved here
HUNG_UP = object()
FULL = object()  # the lane's queue was full: not run, to be answered 429 (``busy_answer``)
QUEUE_PER_BULK_THREAD = 8  # ROTA_WEB_BULK_QUEUE's default, per bulk thread: see above
MAX_RETRY_AFTER_S = 60


def lane_of(scope) -> str:
    """The lane of an HTTP request: bulk for a POST to one of ``BULK_ROUTES``, node for one to ``NODE_ROUTES``,
    interactive for the rest."""
    path = scope["path"]
    if scope["method"] != "POST" or not path.startswith(NODE_PREFIX):
        return INTERACTIVE
    try:
        name = resolve(path).url_name
    except Resolver404:
        return INTERACTIVE
    return BULK if name in BULK_ROUTES else NODE if name in NODE_ROUTES else INTERACTIVE


class Lane:
    """At most ``threads`` requests of one class run at once, each in one of the lane's own long-lived threads;
    the others wait on the event loop, first come first served, at most ``queue`` of them (None: no bound)."""

    def __init__(self, name: str, threads: int, queue: int | None = None) -> None:
        self.name = name
        self.threads = threads
        self.queue = queue
        self.waiting = 0
        self.request_s = 0.5  # a request's recent time in a thread (a moving average), for ``retry_after_s``
        self.promised_at = 0.0  # time.monotonic() of the turn given to the last request refused (``refuse``)
        self.executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=f"rota-web-{name}")
        self._slots: asyncio.Semaphore | None = None  # made on the event loop, at the first request

    async def run(self, receive, call, *args):
        """``call(*args)`` in one of this lane's threads once one is free; ``HUNG_UP`` (and ``call`` not run)
        when the client hangs up first, ``FULL`` (not run) when ``queue`` requests wait already. ``receive``
        is the connection's: its request body was read already, so the next message it gives is the hang-up."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.threads)
        if not self._slots.locked():
            await self._slots.acquire()  # at once
        elif self.queue is not None and self.waiting >= self.queue:
            self.refuse()
            return FULL
        else:
            self.waiting += 1
            try:
                taken = await _acquired_before_hang_up(self._slots, receive)
            finally:
                self.waiting -= 1
            if not taken:
                return HUNG_UP
        loop = asyncio.get_running_loop()
        began = loop.time()
        try:
            return await loop.run_in_executor(self.executor, call, *args)
        finally:
            self._slots.release()
            self.request_s += (loop.time() - began - self.request_s) / 16

    def warm(self, threads: int | None = None, timeout_s: float = 10.0) -> None:
        """Start ``threads`` of this lane's threads now (all of them by default, never more than it has), each
        with its database connection open: otherwise the first requests a fresh worker takes at once (a restart,
        a recycle under load) each wait while their thread connects, and PostgreSQL starts a backend for it, on
        cores the load already has busy: at the full size on 2 cores the first second's users' requests took up
        to 1 s, and set users' p99 for the whole run (bench/README.md, "Workers that start warm, and a fleet that
        registers at once"). Best effort: a database that cannot be reached is logged, and each thread connects
        at its first request as before."""
        count = self.threads if threads is None else max(0, min(threads, self.threads))
        if not count:
            return
        gate = threading.Barrier(count, timeout=timeout_s)

        def connect() -> None:
            gate.wait()  # each call holds its thread until all are running: one call per thread
            connection.ensure_connection()

        calls = [self.executor.submit(connect) for _ in range(count)]
        for call in calls:
            try:
                call.result(timeout=timeout_s * 2)
            except Exception as exc:  # noqa: BLE001 - warming is best effort: the first request connects
                log.warning("lane %s: a thread did not connect ahead of its first request: %s", self.name, exc)
                return

    def refuse(self) -> None:
        """Give a refused request a turn to come back at: once the queue ahead of it clears and after every
        request refused before it, one lane's request time over the threads apart. Naming only when the queue
        clears sent every node refused meanwhile back at the same moment, to find it full again."""
        now, each = time.monotonic(), self.request_s / self.threads
        self.promised_at = max(self.promised_at, now + self.waiting * each) + each

    def retry_after_s(self) -> int:
        """Seconds until the turn given to the last refused request, or until the requests waiting now are
        likely served (their number times a request's recent time, over the threads), whichever is later; at
        least 1, at most ``MAX_RETRY_AFTER_S``."""
        wait = max(self.promised_at - time.monotonic(), self.waiting * self.request_s / self.threads)
        return min(MAX_RETRY_AFTER_S, max(1, math.ceil(wait)))


def busy_answer(lane: Lane) -> list[dict]:
    """The ASGI messages of the 429 to a request ``lane`` had no room to queue."""
    wait = lane.retry_after_s()
    body = json.dumps({"detail": f"the portal is busy: send this again in {wait} s"}).encode()
    return [{"type": "http.response.start", "status": 429,
             "headers": [(b"content-type", b"application/json"), (b"retry-after", str(wait).encode()),
                         (b"content-length", str(len(body)).encode())]},
            {"type": "http.response.body", "body": body}]


async def _acquired_before_hang_up(slots: asyncio.Semaphore, receive) -> bool:
    """Wait for a slot of ``slots``: True once taken, False (none taken) when the client hangs up first."""
    acquiring = asyncio.ensure_future(slots.acquire())
    hung_up = asyncio.ensure_future(hang_up(receive))
    try:
        await asyncio.wait({acquiring, hung_up}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (acquiring, hung_up):  # a slot given as the task is cancelled goes to the next in line
            task.cancel()
        await asyncio.gather(acquiring, hung_up, return_exceptions=True)
    taken = not acquiring.cancelled() and acquiring.exception() is None
    if taken and hung_up.done() and not hung_up.cancelled():  # both at once: give the slot back
        slots.release()
        return False
    return taken


async def hang_up(receive) -> None:
    """Returns when the client disconnects (its request body was read already: nothing else can come)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def lanes() -> dict[str, Lane]:
    """The lanes of this process, sized by the settings."""
    bulk = env_int("ROTA_WEB_BULK_THREADS", 2, minimum=1, maximum=256)
    return {INTERACTIVE: Lane(INTERACTIVE, env_int("ROTA_WEB_THREADS", 16, minimum=2, maximum=1024)),
            NODE: Lane(NODE, env_int("ROTA_WEB_NODE_THREADS", 4, minimum=1, maximum=256)),
            BULK: Lane(BULK, bulk, env_int("ROTA_WEB_BULK_QUEUE", QUEUE_PER_BULK_THREAD * bulk, minimum=1,
                                           maximum=100_000))}
