"""ASGI entry point (``make serve``: gunicorn's uvicorn workers, ``deploy/gunicorn_asgi.conf.py``; ``make dev``:
uvicorn): ``/notebooks/…``, HTTP and websockets, goes to the notebook proxy (``scheduler.notebook_proxy``);
every other request to the portal's WSGI application (``portal/wsgi.py``), run as gunicorn's threaded workers
run it: in fixed pools of long-lived threads, one per lane (``portal/priority.py``): ``ROTA_WEB_THREADS`` for
interactive requests, ``ROTA_WEB_BULK_THREADS`` for the nodes' reports of work done, each lane with its own
queue, so an interactive request never waits behind bulk ones. A node's long-poll goes through that
application too, then waits on the event loop, not in a thread (``portal/longpoll.py``).

Why not Django's own ASGI handler for the rest: it runs each request's sync code in a new thread, so a
persistent database connection (``CONN_MAX_AGE``) is opened per request and never reused (left open until
the thread is collected: PostgreSQL runs out of connections under load); and every view here is sync. In
long-lived threads, connections are kept and reused exactly as under gthread, and the request path through
Django (middleware, views) is the WSGI one."""

import asyncio
import os
import sys
import tempfile

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
wsgi_app = get_wsgi_application()  # sets Django up before the imports below

from django.conf import settings  # noqa: E402

from portal import longpoll, priority  # noqa: E402
from portal.env import env_int  # noqa: E402
from scheduler import notebook_proxy  # noqa: E402

if settings.DEBUG and "django.contrib.staticfiles" in settings.INSTALLED_APPS:  # as runserver serves them
    from django.contrib.staticfiles.handlers import StaticFilesHandler

    wsgi_app = StaticFilesHandler(wsgi_app)

lanes = priority.lanes()
pool = lanes[priority.INTERACTIVE].executor
notebook_proxy.executor = pool  # its session and access checks use the interactive threads and connections
BODY_IN_MEMORY = 1024 * 1024  # a larger request body is spooled to a temporary file


def warm(role: str) -> None:
    """Start the threads of each lane a server of ``role`` serves (at most ``ROTA_WEB_WARM_THREADS`` a lane where
    set), each connected to the database, before the worker takes its first request (``deploy/gunicorn.conf.py``'s
    ``post_worker_init``). The connections are those the lanes open under load anyway, so PostgreSQL's
    ``max_connections`` must already hold them (with the Celery workers'); they are only opened first."""
    threads = env_int("ROTA_WEB_WARM_THREADS", 1024, minimum=0, maximum=1024)  # a lane warms at most its own
    for name in priority.ROLE_LANES[role]:
        lanes[name].warm(threads)


async def application(scope, receive, send):
    """Route one connection: the notebook proxy for its prefix, the WSGI app for other HTTP requests."""
    kind = scope["type"]
    if kind in ("http", "websocket") and scope["path"].startswith(notebook_proxy.PREFIX):
        await notebook_proxy.app(scope, receive, send)
    elif longpoll.handles(scope):
        await longpoll.serve(scope, receive, send, _wsgi, lanes[priority.NODE])
    elif kind == "http":
        await _wsgi(scope, receive, send)
    elif kind == "websocket":  # the portal serves no other websockets
        await receive()
        await send({"type": "websocket.close", "code": 1000})
    elif kind == "lifespan":  # nothing to set up or tear down
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})


def _environ(scope, body) -> dict:
    server = scope.get("server") or ("localhost", 80)
    client = scope.get("client") or ("", 0)
    environ = {
        "REQUEST_METHOD": scope["method"], "SCRIPT_NAME": scope.get("root_path", ""),
        "PATH_INFO": scope["path"].encode("utf-8").decode("latin-1"),
        "QUERY_STRING": (scope.get("query_string") or b"").decode("latin-1"),
        "SERVER_NAME": str(server[0]), "SERVER_PORT": str(server[1] or 80), "REMOTE_ADDR": str(client[0]),
        "SERVER_PROTOCOL": f"HTTP/{scope.get('http_version', '1.1')}",
        "wsgi.version": (1, 0), "wsgi.url_scheme": scope.get("scheme", "http"), "wsgi.input": body,
        "wsgi.errors": sys.stderr, "wsgi.multithread": True, "wsgi.multiprocess": True, "wsgi.run_once": False,
    }
    for raw_name, raw_value in scope["headers"]:
        name, value = raw_name.decode("latin-1").upper().replace("-", "_"), raw_value.decode("latin-1")
        key = name if name in ("CONTENT_TYPE", "CONTENT_LENGTH") else f"HTTP_{name}"
        environ[key] = f"{environ[key]},{value}" if key in environ else value
    return environ


async def _wsgi(scope, receive, send, extra_environ: dict | None = None) -> None:
    body = tempfile.SpooledTemporaryFile(max_size=BODY_IN_MEMORY)
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            body.close()
            return
        body.write(message.get("body", b""))
        if not message.get("more_body"):
            break
    body.seek(0)
    loop = asyncio.get_running_loop()

    async def send_all(messages) -> None:
        for message in messages:
            await send(message)

    def relay(*messages) -> None:  # from the pool thread: hand messages to the event loop, wait until sent
        asyncio.run_coroutine_threadsafe(send_all(messages), loop).result()

    try:
        environ = _environ(scope, body)
        environ.update(extra_environ or {})
        lane = lanes[priority.lane_of(scope)]
        if await lane.run(receive, _run, environ, relay) is priority.FULL:
            await send_all(priority.busy_answer(lane))
    finally:
        body.close()


def _run(environ, relay) -> None:
    """Call the WSGI app in a pool thread and send its answer back: a whole answer (Django's ``HttpResponse``,
    every API answer) in one hand-over to the event loop, a streamed one chunk by chunk (headers with the
    first). Each hand-over wakes the loop and waits for it: one instead of three per answer."""
    started = []

    def start_response(status, headers, exc_info=None):
        started[:] = [int(status.split(" ", 1)[0]),
                      [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]]
        return lambda data: None  # the legacy write() callable: Django never uses it

    result = wsgi_app(environ, start_response)
    try:
        if getattr(result, "streaming", True) is False:  # its whole body is in memory already
            body = b"".join(result)
            relay({"type": "http.response.start", "status": started[0], "headers": started[1]},
                  {"type": "http.response.body", "body": body})
            return
        sent_head = False
        for chunk in result:
            if not chunk:
                continue
            if not sent_head:
                relay({"type": "http.response.start", "status": started[0], "headers": started[1]})
                sent_head = True
            relay({"type": "http.response.body", "body": bytes(chunk), "more_body": True})
        if not sent_head:
            relay({"type": "http.response.start", "status": started[0], "headers": started[1]})
        relay({"type": "http.response.body", "body": b""})
    finally:
        if hasattr(result, "close"):
            result.close()  # Django's request_finished: connections closed or kept as under any WSGI server
