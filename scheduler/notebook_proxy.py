"""The portal's proxy to notebook servers: ``/notebooks/<id>/…``, HTTP and websockets (kernels talk over
them), an ASGI app in front of Django's (``portal/asgi.py``).

Each request is checked against the portal's session: a member of the job's team goes through, with the
notebook server's token added here (``Authorization: token …``), so nobody needs or sees it; anyone else,
platform admins included, gets the same 404 as for a missing job; someone not signed in is sent to the login
page (a websocket: 404). A member opening a notebook that has ended hears 410 Gone, with a page saying when and
how to start another; one not running yet, 503 with a page saying so. The portal's own cookies (session, CSRF)
are taken out of what is forwarded, and a websocket or a state-changing request from another site's page (its
``Origin``) is refused (403): the token added here would otherwise let such a page drive the notebook with the
visitor's session. Paths pass through unchanged: the server runs with ``/notebooks/<id>/`` as its base URL
(``scheduler.notebooks``)."""

from __future__ import annotations

import asyncio
import contextlib
import re
import urllib.parse
from http.cookies import CookieError, SimpleCookie
from types import SimpleNamespace

import h11
from django.conf import settings
from django.db import close_old_connections
from django.http import Http404
from django.shortcuts import resolve_url
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from scheduler.models.jobs import FINAL_STATES
from scheduler.notebooks import Upstream, upstream

PREFIX = "/notebooks/"
_PATH = re.compile(r"^/notebooks/(\d{1,18})(?:/|$)")
CONNECT_TIMEOUT_S = 5.0
WS_OPEN_TIMEOUT_S = 60.0  # Jupyter answers a kernel's websocket handshake once the kernel is ready
MAX_BODY = 256 * 1024 * 1024  # a request body larger than this is refused (413); Jupyter uploads in chunks
MAX_WS_MESSAGE = 64 * 1024 * 1024
HOP_BY_HOP = {b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"te", b"trailer",
              b"transfer-encoding", b"upgrade", b"content-length", b"authorization", b"cookie",
              b"accept-encoding"}  # and answers unencoded: a page's token is taken out of it (_exchange)
SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}
executor = None  # the threads that run the session and access checks: portal/asgi.py's pool (None: asyncio's)


class Refused(Exception):
    """Answer the request with ``status`` (and ``location`` for a redirect) instead of forwarding it."""

    def __init__(self, status: int, message: str, location: str = "", page: str = "") -> None:
        super().__init__(message)
        self.status, self.message, self.location, self.page = status, message, location, page


def _header(scope, name: bytes) -> str:
    return next((v.decode("latin-1") for k, v in scope["headers"] if k == name), "")


def _portal_cookies() -> set[str]:
    return {settings.SESSION_COOKIE_NAME, settings.CSRF_COOKIE_NAME}


def _target(cookie_header: str, job_id: int, path: str) -> Upstream:
    """Who the session is and whether they may enter notebook ``job_id``: its server, else Refused."""
    from django.contrib.auth import get_user
    from django.utils.module_loading import import_string

    from portal.access import job_for_member

    close_old_connections()  # as Django does around each request: a connection broken meanwhile is replaced
    try:
        try:
            cookies = SimpleCookie(cookie_header)
        except CookieError:
            cookies = SimpleCookie()
        morsel = cookies.get(settings.SESSION_COOKIE_NAME)
        store = import_string(f"{settings.SESSION_ENGINE}.SessionStore")(morsel.value if morsel else None)
        user = get_user(SimpleNamespace(session=store))
        if not user.is_authenticated:
            raise Refused(302, "Sign in to open this notebook.",
                          f"{resolve_url(settings.LOGIN_URL)}?{urllib.parse.urlencode({'next': path})}")
        try:
            job = job_for_member(user, job_id)
        except Http404:
            raise Refused(404, "No such notebook.") from None
        target = upstream(job)
        if target is None and job.state in FINAL_STATES:
            raise Refused(410, _ended_message(job), page=_page("notebooks/ended.html", user, job, path))
        if target is None:
            raise Refused(503, f"Notebook {job_id} is not running ({job.state}); open it from its job page.",
                          page=_page("notebooks/not_running.html", user, job, path))
        return target
    finally:
        close_old_connections()


def _ended_message(job) -> str:
    from django.utils import timezone

    when = f" at {timezone.localtime(job.finished_at):%Y-%m-%d %H:%M %Z}" if job.finished_at else ""
    return (f"Notebook {job.pk} has ended{when} ({job.state}). Start another from "
            f"{resolve_url('job-submit')}?copy={job.pk} (a copy of this one) or ?kind=notebook.")


def _page(template: str, user, job, path: str) -> str:
    """What a member's browser shows for a notebook that has ended or does not run yet (the portal's own
    layout and navigation)."""
    from django.http import HttpRequest
    from django.template.loader import render_to_string

    request = HttpRequest()
    request.method, request.path, request.user = "GET", path, user
    return render_to_string(template, {"job": job}, request=request)


def _same_origin(scope) -> bool:
    """True when the request carries no ``Origin`` or one naming this portal's own host."""
    origin = _header(scope, b"origin")
    return not origin or urllib.parse.urlsplit(origin).netloc == _header(scope, b"host")


def _forwarded_headers(scope) -> list[tuple[bytes, bytes]]:
    """The browser's headers without hop-by-hop ones, its credentials, or the portal's own cookies."""
    keep = [(k, v) for k, v in scope["headers"] if k not in HOP_BY_HOP]
    cookie = _header(scope, b"cookie")
    if cookie:
        portal = _portal_cookies()
        rest = [c.strip() for c in cookie.split(";") if c.strip() and c.split("=", 1)[0].strip() not in portal]
        if rest:
            keep.append((b"cookie", "; ".join(rest).encode("latin-1")))
    return keep


async def _answer(send, status: int, message: str, location: str = "", websocket: bool = False,
                  page: str = "") -> None:
    kind = b"text/html" if page else b"text/plain"
    headers = [(b"content-type", kind + b"; charset=utf-8")]
    if location:
        headers.append((b"location", location.encode()))
    prefix = "websocket.http.response" if websocket else "http.response"
    await send({"type": f"{prefix}.start", "status": status, "headers": headers})
    await send({"type": f"{prefix}.body", "body": (page or message).encode()})


async def app(scope, receive, send) -> None:
    """Serve one ``/notebooks/…`` request (``scope["type"]`` http or websocket)."""
    websocket = scope["type"] == "websocket"
    path = scope["path"]
    match = _PATH.match(path)
    try:
        if match is None:
            raise Refused(404, "No such notebook.")
        if (websocket or scope["method"] not in SAFE_METHODS) and not _same_origin(scope):
            raise Refused(403, "Refused: the request comes from another site's page.")
        target = await asyncio.get_running_loop().run_in_executor(
            executor, _target, _header(scope, b"cookie"), int(match.group(1)), path)
    except Refused as refused:
        if websocket:
            await receive()  # websocket.connect
            if "websocket.http.response" in scope.get("extensions", {}):
                await _answer(send, 404 if refused.status == 302 else refused.status, refused.message,
                              websocket=True)
            else:
                await send({"type": "websocket.close", "code": 1008})
        else:
            await _answer(send, refused.status, refused.message, refused.location, page=refused.page)
        return
    if websocket:
        await _websocket(scope, receive, send, target)
    else:
        await _http(scope, receive, send, target)


def _raw_path(scope) -> str:
    raw = scope.get("raw_path") or scope["path"].encode()
    query = scope.get("query_string") or b""
    return (raw + (b"?" + query if query else b"")).decode("latin-1")


async def _http(scope, receive, send, target: Upstream) -> None:
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        body += message.get("body", b"")
        if len(body) > MAX_BODY:
            await _answer(send, 413, f"Request body over {MAX_BODY // 2**20} MiB.")
            return
        if not message.get("more_body"):
            break
    host, _, port = target.address.rpartition(":")
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError):
        await _answer(send, 502, "The notebook server does not answer (yet): try again in a moment.")
        return
    try:
        await _exchange(scope, send, reader, writer, target, bytes(body))
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def _exchange(scope, send, reader, writer, target: Upstream, body: bytes) -> None:
    """One request to the server and its answer streamed back (h11 speaks HTTP/1.1 for us)."""
    conn = h11.Connection(h11.CLIENT)
    headers = [*_forwarded_headers(scope), (b"authorization", f"token {target.token}".encode()),
               (b"content-length", str(len(body)).encode()), (b"connection", b"close")]
    if not _header(scope, b"host"):
        headers.append((b"host", target.address.encode()))
    writer.write(conn.send(h11.Request(method=scope["method"], target=_raw_path(scope), headers=headers)))
    writer.write(conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage()))
    await writer.drain()
    started, page = False, None  # page: an HTML answer, held back to take the token out of it
    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError:  # the server broke off mid-answer
            event = h11.ConnectionClosed()
        if event is h11.NEED_DATA:
            conn.receive_data(await reader.read(65536))
            continue
        if isinstance(event, h11.Response):
            kept = [(k, v) for k, v in event.headers if k.lower() not in {b"connection", b"keep-alive",
                                                                         b"transfer-encoding"}]
            if dict(kept).get(b"content-type", b"").startswith(b"text/html"):
                page = (event.status_code, [(k, v) for k, v in kept if k.lower() != b"content-length"], bytearray())
                continue
            await send({"type": "http.response.start", "status": event.status_code, "headers": kept})
            started = True
        elif isinstance(event, h11.Data) and page is not None:
            page[2].extend(event.data)
        elif isinstance(event, h11.Data) and started:
            await send({"type": "http.response.body", "body": bytes(event.data), "more_body": True})
        elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
            if page is not None:  # JupyterLab writes its token into the page's config: nobody is given it
                body = bytes(page[2]).replace(target.token.encode(), b"")
                await send({"type": "http.response.start", "status": page[0],
                            "headers": [*page[1], (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
            elif started:
                await send({"type": "http.response.body", "body": b""})
            else:
                await _answer(send, 502, "The notebook server closed the connection without answering.")
            return


async def _websocket(scope, receive, send, target: Upstream) -> None:
    await receive()  # websocket.connect
    url = f"ws://{target.address}{_raw_path(scope)}"
    extra = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in _forwarded_headers(scope)
             if not k.startswith(b"sec-websocket-") and k not in {b"host", b"origin"}]
    extra.append(("Authorization", f"token {target.token}"))
    try:
        upstream_ws = await ws_connect(
            url, additional_headers=extra, origin=f"http://{target.address}",
            subprotocols=scope.get("subprotocols") or None, max_size=MAX_WS_MESSAGE,
            open_timeout=WS_OPEN_TIMEOUT_S, compression=None)
    except (OSError, TimeoutError, InvalidHandshake) as error:
        if "websocket.http.response" in scope.get("extensions", {}):
            await _answer(send, 502, f"The notebook server refused the websocket: {error}", websocket=True)
        else:
            await send({"type": "websocket.close", "code": 1011})
        return
    await send({"type": "websocket.accept", "subprotocol": upstream_ws.subprotocol})

    async def browser_to_server() -> None:
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            data = message.get("bytes") if message.get("bytes") is not None else message.get("text")
            if data is not None:
                await upstream_ws.send(data)

    async def server_to_browser() -> None:
        with contextlib.suppress(ConnectionClosed):
            async for data in upstream_ws:
                key = "bytes" if isinstance(data, bytes) else "text"
                await send({"type": "websocket.send", key: data})
        with contextlib.suppress(Exception):  # the browser may be gone already
            await send({"type": "websocket.close", "code": 1000})

    tasks = [asyncio.ensure_future(browser_to_server()), asyncio.ensure_future(server_to_browser())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await upstream_ws.close()
