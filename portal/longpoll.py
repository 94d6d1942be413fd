"""A node's long-poll (``POST /api/v1/node/wait/``) held on the ASGI server's event loop (``portal/asgi.py``), so
that a held wait costs neither a web thread nor CPU: the thread pool stays free for the requests that work.

The request first goes through the portal's WSGI application in the pool like any other, so the node's token,
the rate limit, the body's validation and every middleware rule are the ones ``NodeWaitAPI`` applies (an
error is answered by it, as it is). An accepted request does not wait there: the view hands the node and the
timeout to this module (``WAIT_ON_LOOP`` in its environ) and answers at once; the wait then runs here, on
Redis's asyncio client (``scheduler.wake.node_wait_async``: one BLPOP on the node's own news key, the very
command the threaded path sends, so news is taken by exactly the wait that answers it), and the view's
answer goes out with the wait's body (``wake.node_wait_answer``) and the view's status and headers. A node that
asked for its assignments with its news gets them in that body: built once the news came, in a thread of the
``node`` lane (``portal/priority.py``), as the view would have built them under gthread.

A node that hangs up stops its wait (the connection it blocked is closed). At most
``ROTA_NODE_ASYNC_WAITERS_PER_PROCESS`` waits are held at once per web process; past that, or without
Redis, the answer is ``{"news": false, "waited": false}`` at once and the node polls at its heartbeat
interval, as under gthread."""

import asyncio
import json

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import close_old_connections
from django.urls import reverse

from portal import priority
from scheduler import wake
from scheduler.api.node import WAIT_ON_LOOP

PATH = reverse("node-wait")  # /api/v1/node/wait/
HUNG_UP = object()  # _wait's answer when the node went away: nothing to send
_held = 0  # waits this process holds now (the event loop's thread is the only one to count)


def handles(scope) -> bool:
    """Whether this connection is a node's long-poll."""
    return scope["type"] == "http" and scope["method"] == "POST" and scope["path"] == PATH


async def serve(scope, receive, send, wsgi, lane: priority.Lane) -> None:
    """Answer one long-poll; ``wsgi(scope, receive, send, environ)`` runs the request through the portal's WSGI
    application in the thread pool (``portal.asgi._wsgi``); ``lane`` runs a delivery."""
    asked: list[tuple] = []
    answer: list[dict] = []

    async def keep(message) -> None:
        answer.append(message)

    await wsgi(scope, receive, keep, {WAIT_ON_LOOP: lambda *wait: asked.append(wait)})
    if asked and answer and answer[0]["status"] == 200:
        node_id, timeout_s, deliver = asked[0]
        news = await _wait(node_id, timeout_s, receive)
        if news is HUNG_UP:
            return
        told = await lane.run(receive, _delivered, news, deliver) if news and deliver else wake.node_wait_answer(news)
        if told is priority.HUNG_UP:
            return
        body = json.dumps(told, separators=(",", ":"), cls=DjangoJSONEncoder).encode()  # as DRF renders it
        answer = [_with_length(answer[0], len(body)), {"type": "http.response.body", "body": body}]
    for message in answer:
        await send(message)


async def _wait(node_id: int, timeout_s: float, receive):
    """``wake.node_wait_async`` unless this process holds its most waits already (None), or ``HUNG_UP`` when
    the node hangs up first."""
    global _held
    limit = settings.ROTA_NODE_ASYNC_WAITERS_PER_PROCESS
    if _held >= limit:
        return None
    _held += 1
    waiting = asyncio.ensure_future(wake.node_wait_async(node_id, timeout_s, max_connections=limit))
    hung_up = asyncio.ensure_future(priority.hang_up(receive))
    try:
        await asyncio.wait({waiting, hung_up}, return_when=asyncio.FIRST_COMPLETED)
        return waiting.result() if waiting.done() else HUNG_UP
    finally:
        _held -= 1
        for task in (waiting, hung_up):
            task.cancel()
        await asyncio.gather(waiting, hung_up, return_exceptions=True)  # the Redis connection is given back


def _delivered(news: bool, deliver) -> dict:
    """``wake.node_wait_answer`` with the delivery, in a web thread as a request would run it: its database
    connection checked before and after, as Django does at each request's start and end."""
    close_old_connections()
    try:
        return wake.node_wait_answer(news, deliver)
    finally:
        close_old_connections()


def _with_length(start: dict, length: int) -> dict:
    headers = [(name, value) for name, value in start["headers"] if name != b"content-length"]
    return {**start, "headers": [*headers, (b"content-length", str(length).encode())]}
