"""Which requests wait for which in a web process (``portal/asgi.py``): Kubernetes' API Priority and Fairness cut
to two lanes, each with threads of its own and its own queue, so no request queues behind bulk traffic.

**Bulk** is the nodes' reports of work done: job events (``POST /api/v1/node/events/``, the batch, and the
single event's endpoint), log chunks and Slurm accounting records. They come in at the drain's pace (at the
full size ~80 a second, most of the portal's CPU), a node sends its next only when the last is answered, and
they may wait: a job's state is already on the node, the agent keeps its events until they are answered, and
the cycle places work from what it has. Everything else is **interactive**: users' pages and API, and the
nodes' control requests (register, heartbeat, the long-poll's check), whose delay marks a node down or
holds back news of work to start.

Each lane runs at most its number of requests at once, in its own threads (``ROTA_WEB_THREADS`` interactive,
``ROTA_WEB_BULK_THREADS`` bulk, each thread with its own database connection); the rest wait on the event loop
in the order they came. So while bulk requests are queued an interactive request starts at once, and bulk gets
its own threads' share whatever the interactive load (it is never starved). Bulk's threads are fewer than the
interactive ones: in one process they share the interpreter's lock, so each busy bulk thread slows an
interactive request running beside it, and the queue is where bulk waits. 6 by default: while events were
applied one transaction each, 2 per process made the drain twice as long; now that a batch is one transaction,
2 drain as fast and serve users faster, but 5x more reports wait past a node's timeout (it sends them again)
(bench/README.md, "User requests before node traffic" and "The full size with two lanes").

A request whose client hangs up while it waits is not run at all: an agent that gave up on an answer
(``scheduler/agent/client.py``'s timeout) sends the same events again, and the stale copy would only take
the place of the fresh one."""

import asyncio
from concurrent.futures import ThreadPoolExecutor

from django.urls import Resolver404, resolve

from portal.env import env_int

INTERACTIVE, BULK = "interactive", "bulk"
BULK_ROUTES = frozenset({"node-job-events", "node-job-event", "node-job-log", "node-slurm-accounting"})
NODE_PREFIX = "/api/v1/node/"  # every bulk route is under it: other paths are not resolved here
HUNG_UP = object()


def lane_of(scope) -> str:
    """The lane of an HTTP request: bulk for a POST to one of ``BULK_ROUTES``, interactive for the rest."""
    path = scope["path"]
    if scope["method"] != "POST" or not path.startswith(NODE_PREFIX):
        return INTERACTIVE
    try:
        return BULK if resolve(path).url_name in BULK_ROUTES else INTERACTIVE
    except Resolver404:
        return INTERACTIVE


class Lane:
    """At most ``threads`` requests of one class run at once, each in one of the lane's own long-lived threads;
    the others wait on the event loop, first come first served."""

    def __init__(self, name: str, threads: int) -> None:
        self.name = name
        self.threads = threads
        self.executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=f"rota-web-{name}")
        self._slots: asyncio.Semaphore | None = None  # made on the event loop, at the first request

    async def run(self, receive, call, *args):
        """``call(*args)`` in one of this lane's threads once one is free; ``HUNG_UP`` (and ``call`` not run)
        when the client hangs up first. ``receive`` is the connection's: its request body was read already,
        so the next message it gives is the hang-up."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.threads)
        if not self._slots.locked():
            await self._slots.acquire()  # at once
        elif not await _acquired_before_hang_up(self._slots, receive):
            return HUNG_UP
        try:
            return await asyncio.get_running_loop().run_in_executor(self.executor, call, *args)
        finally:
            self._slots.release()


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
    return {INTERACTIVE: Lane(INTERACTIVE, env_int("ROTA_WEB_THREADS", 16, minimum=2, maximum=1024)),
            BULK: Lane(BULK, env_int("ROTA_WEB_BULK_THREADS", 6, minimum=1, maximum=256))}
