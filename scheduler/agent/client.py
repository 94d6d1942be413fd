"""The portal's node API over HTTP (``docs/node-protocol.md``), with errors sorted by what to do next."""

from __future__ import annotations

import logging
import random
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests
from urllib3.exceptions import ConnectTimeoutError

log = logging.getLogger(__name__)
DEFAULT_TIMEOUT_S = 10.0
MAX_RETRY_AFTER_S = 120.0  # a portal's Retry-After is honoured up to this
CONTROL_CONNECT_S = 2.0  # the node-control server not connected in this long is not there (heartbeat())
CONTROL_BACK_OFF_S = 30.0  # then heartbeats go to --portal this long, doubled at each failure up to the next
CONTROL_BACK_OFF_MAX_S = 600.0
CONTROL_FAILURES = 2  # failed answers in a row from a control server that is there, before the back-off


class PortalError(Exception):
    """Base of the errors below."""


class PortalUnavailable(PortalError):
    """No usable answer: connection refused, timeout, 5xx, 429 or a body that is not JSON. Retry later: not
    before ``retry_after_s`` when the portal said so (``Retry-After``)."""

    def __init__(self, message: str, retry_after_s: float | None = None, status: int | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.status = status  # the HTTP status, when there was an answer


class RegisterRequired(PortalError):
    """The portal answered 409 ``{"detail": "register"}``: register again, then carry on."""


class PortalRejected(PortalError):
    """A 4xx answer other than "register": the report is wrong or not this node's to make; don't resend."""

    def __init__(self, status: int, detail: str, field: str = "") -> None:
        """Keep the status code and the portal's ``detail``/``field``."""
        super().__init__(f"{status}: {detail}" + (f" (field {field})" if field else ""))
        self.status = status
        self.detail = detail
        self.field = field


def _environment_once(session: requests.Session, url: str) -> None:
    """Take the environment's proxy (``HTTPS_PROXY``, ``NO_PROXY``...) and CA bundle (``REQUESTS_CA_BUNDLE``)
    settings for ``url`` now, once, instead of at every request: ``requests`` reads every variable and
    ``~/.netrc`` per request, a few ms of CPU each, and a node turning over short jobs sends several
    requests a second. A ``~/.netrc`` entry is not used (its basic auth would replace the node's token)."""
    found = session.merge_environment_settings(url, {}, None, None, None)
    session.trust_env = False
    session.proxies.update(found["proxies"])
    session.verify = found["verify"]


class PortalClient:
    """Posts the agent's reports; every call raises one of the errors above or returns the JSON answer."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        session: requests.Session | None = None,
        token_file: Path | None = None,
    ) -> None:
        """``base_url`` is the portal root (``https://rota.example.com``); ``token`` the node's token, read
        from ``token_file`` when given. A refused token (401) makes the client read that file again: an
        admin's ``node_token rotate`` then only needs the new token written there, no agent restart."""
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.token_file = token_file
        self._token = token
        self._session = session or requests.Session()
        self._session.headers.update({"Authorization": f"Node {token}", "User-Agent": "rota-agent"})
        self._batch_events = True  # until the portal answers that it has no batch endpoint
        self._reports_not_before = 0.0  # time.monotonic(): the portal asked the reports to wait until then
        self._wait_session = requests.Session()
        self._wait_session.headers["User-Agent"] = "rota-agent"
        for each in (self._session, self._wait_session):
            _environment_once(each, self.base_url)
        self.heartbeat_url = self.base_url  # the node-control server, once the portal names one
        self._heartbeat_session = self._session
        self._control_back_off_until = 0.0  # time.monotonic(): heartbeats go to base_url until then
        self._control_back_off_s = CONTROL_BACK_OFF_S
        self._control_failures = 0  # failed heartbeats at the control server in a row
        self._refused_url: object = None  # the last heartbeat address refused (warned about once)

    def register(self, body: dict[str, Any]) -> dict[str, Any]:
        """``POST /api/v1/node/register/``; returns the node name, heartbeat interval and timeout, and where
        the portal takes heartbeats (``heartbeat_url``, its node-control server) if not at ``base_url``: the
        heartbeats go there from now on."""
        answer = self._post("/api/v1/node/register/", body)
        self._heartbeat_to(answer.get("heartbeat_url"))
        return answer

    def heartbeat(self, body: dict[str, Any]) -> dict[str, Any]:
        """``POST /api/v1/node/heartbeat/``; returns ``{"heartbeat_interval_s", "assignments"}``. Sent to
        the node-control server where the portal named one (its answers may name another, or none). When that
        server is not there (no connection within ``CONTROL_CONNECT_S``, no TLS or proxy tunnel to it; a
        proxy's 502/503 without ``Retry-After``; 404 or 405: no such route), the heartbeat goes to
        ``base_url``, which takes heartbeats as well, and so do the next ones for a while
        (``CONTROL_BACK_OFF_S``, doubled at each failure up to ``CONTROL_BACK_OFF_MAX_S``). An answer the
        server may have taken (a timeout, a connection cut once sent, a 500, a 504) is not sent elsewhere,
        since a resent seq would be refused: it is raised, and only after ``CONTROL_FAILURES`` of those in a
        row do the next heartbeats (new seqs) go to ``base_url`` for the back-off. A ``Retry-After`` is
        always honoured."""
        path = "/api/v1/node/heartbeat/"
        answer = self._heartbeat_at_control(path, body)
        if answer is None:
            answer = self._post(path, body)
        self._heartbeat_to(answer.get("heartbeat_url"))
        return answer

    def _heartbeat_at_control(self, path: str, body: dict[str, Any]) -> dict[str, Any] | None:
        """The heartbeat's answer from the node-control server; None when there is none to ask (not named, or
        in its back-off) or it is not there (``_control_absent``): the heartbeat then goes to ``base_url``."""
        if self.heartbeat_url == self.base_url or time.monotonic() < self._control_back_off_until:
            return None
        try:
            answer = self._post(path, body, session=self._heartbeat_session, url=self.heartbeat_url,
                                timeout=(CONTROL_CONNECT_S, self.timeout_s))
        except (PortalUnavailable, PortalRejected) as error:
            absent = _control_absent(error)
            self._control_failures += 1
            busy = isinstance(error, PortalUnavailable) and error.retry_after_s is not None
            if absent or (self._control_failures >= CONTROL_FAILURES and not busy):
                self._control_back_off_until = time.monotonic() + self._control_back_off_s
                log.warning("%s; heartbeats go to %s for %.0f s", error, self.base_url,
                            self._control_back_off_s)
                self._control_back_off_s = min(self._control_back_off_s * 2, CONTROL_BACK_OFF_MAX_S)
            if absent:
                return None
            raise
        self._control_back_off_s, self._control_failures = CONTROL_BACK_OFF_S, 0
        return answer

    def _heartbeat_to(self, url: object) -> None:
        """Send heartbeats to ``url`` (the server root the portal's answer names); to ``base_url`` when it is
        absent or unfit (``_usable_control_url``)."""
        wanted = _usable_control_url(url, self.base_url)
        if url and not wanted and url != self._refused_url:
            self._refused_url = url  # said once, not at every answer
            log.warning("the portal named a heartbeat address this agent does not use (%r: an http(s) "
                        "server root without user, and https where --portal is); heartbeats go to %s",
                        url, self.base_url)
        wanted = wanted or self.base_url
        if wanted == self.heartbeat_url:
            return
        if self._heartbeat_session is not self._session:
            self._heartbeat_session.close()
        self.heartbeat_url, self._heartbeat_session = wanted, self._session
        self._control_back_off_until, self._control_back_off_s = 0.0, CONTROL_BACK_OFF_S
        self._control_failures = 0
        if wanted != self.base_url:
            self._heartbeat_session = requests.Session()
            self._heartbeat_session.headers.update(self._session.headers)
            self._heartbeat_session.cert = self._session.cert  # a client certificate the agent was given
            _environment_once(self._heartbeat_session, wanted)  # its own proxy settings: another host, maybe
            if self._session.verify is not True:  # a CA bundle the agent was given, not the environment's
                self._heartbeat_session.verify = self._session.verify
        log.info("heartbeats go to %s", wanted)

    def wait(self, timeout_s: float) -> dict[str, Any]:
        """``POST /api/v1/node/wait/``: held by the portal until this node has news or ``timeout_s`` passes;
        returns ``{"news", "waited"}``, with news the node's assignments (``as_of``, ``assignments``) where
        the portal delivers them. Called from its own thread, so on its own connection."""
        try:
            response = self._wait_session.post(
                self.base_url + "/api/v1/node/wait/", json={"timeout_s": timeout_s, "assignments": True},
                headers={"Authorization": f"Node {self._token}"}, timeout=timeout_s + self.timeout_s)
        except requests.RequestException as error:
            raise PortalUnavailable(f"/api/v1/node/wait/: {error.__class__.__name__}: {error}") from error
        return self._answer("/api/v1/node/wait/", response)

    def job_event(self, job_id: int, body: dict[str, Any]) -> None:
        """``POST /api/v1/node/jobs/{job_id}/events/``."""
        self._post(f"/api/v1/node/jobs/{job_id}/events/", body, report=True)

    def job_events(self, events: list[tuple[int, dict[str, Any]]]) -> list[dict[str, Any]]:
        """``POST /api/v1/node/events/``: many ``(job_id, event body)`` in one request; one result per
        event, ``{"job_id", "state"}`` or, refused, ``{"job_id", "status", "detail"}``. A portal without that
        endpoint (404, 405), or one refusing the whole request (400: an event it cannot read), gets them one
        by one, so each refusal is its event's alone. Unavailable or "register": raised, nothing popped."""
        if self._batch_events:
            try:
                batch = {"events": [{"job_id": job_id, **body} for job_id, body in events]}
                answer = self._post("/api/v1/node/events/", batch, report=True)
                results = answer.get("results")
                if isinstance(results, list) and len(results) == len(events):
                    return results
                raise PortalUnavailable("/api/v1/node/events/: an answer without one result per event")
            except PortalRejected as error:
                if error.status in (404, 405):
                    log.info("the portal takes job events one by one (no /api/v1/node/events/)")
                    self._batch_events = False
                elif error.status != 400:
                    raise
        results: list[dict[str, Any]] = []
        for job_id, body in events:
            try:
                self.job_event(job_id, body)
                results.append({"job_id": job_id})
            except PortalRejected as error:
                results.append({"job_id": job_id, "status": error.status, "detail": error.detail})
        return results

    def job_log(self, job_id: int, body: dict[str, Any]) -> None:
        """``POST /api/v1/node/jobs/{job_id}/log/``."""
        self._post(f"/api/v1/node/jobs/{job_id}/log/", body, report=True)

    def close(self) -> None:
        """Close pooled connections."""
        self._session.close()
        self._wait_session.close()
        self._heartbeat_session.close()

    def _reread_token(self) -> bool:
        """Take the token file's current token if it is another one than in use; True when it was."""
        if self.token_file is None:
            return False
        try:
            token = self.token_file.read_text().strip()
        except OSError as error:
            log.warning("cannot read the token file %s: %s", self.token_file, error.strerror)
            return False
        if not token or token == self._token:
            return False
        log.info("the portal refused the node token; using the new one in %s", self.token_file)
        self._token = token
        for session in (self._session, self._heartbeat_session):
            session.headers["Authorization"] = f"Node {token}"
        return True

    def _post(self, path: str, body: dict[str, Any], *, report: bool = False,
              session: requests.Session | None = None, url: str = "",
              timeout: float | tuple[float, float] | None = None) -> dict[str, Any]:
        """POST ``body``. A ``report`` (job events, log chunks: the portal's bulk lane, portal/priority.py)
        is not sent while the portal's last ``Retry-After`` for reports runs: PortalUnavailable at once, and
        the caller keeps what it was to send for a later pass. Heartbeats are never held back."""
        if report:
            left = self._reports_not_before - time.monotonic()
            if left > 0:
                raise PortalUnavailable(f"{path}: the portal asked reports to wait {left:.1f} s more", left)
        response = self._send(path, body, session, url, timeout)
        if response.status_code == 401 and self._reread_token():
            response = self._send(path, body, session, url, timeout)
        try:
            return self._answer(path, response)
        except PortalUnavailable as error:
            if report and error.retry_after_s:  # nodes told alike come back spread over a quarter more
                wait = error.retry_after_s * random.uniform(1.0, 1.25)
                self._reports_not_before = time.monotonic() + wait
                log.info("%s: the portal is busy; reports wait %.1f s (Retry-After)", path, wait)
            raise

    def _send(self, path: str, body: dict[str, Any], session: requests.Session | None = None, url: str = "",
              timeout: float | tuple[float, float] | None = None) -> requests.Response:
        try:
            response = (session or self._session).post((url or self.base_url) + path, json=body,
                                                       timeout=timeout or self.timeout_s)
        except requests.RequestException as error:
            raise PortalUnavailable(f"{path}: {error.__class__.__name__}: {error}") from error
        return response

    @staticmethod
    def _answer(path: str, response: requests.Response) -> dict[str, Any]:
        status = response.status_code
        try:
            answer = response.json() if response.content else {}
        except ValueError:
            answer = None
        if status >= 500 or status == 429:
            retry_after = _retry_after_s(response.headers.get("Retry-After"))
            raise PortalUnavailable(f"{path}: HTTP {status}", retry_after, status)
        if status >= 400:
            detail = answer.get("detail", "") if isinstance(answer, dict) else response.text[:200]
            if status == 409 and detail == "register":
                raise RegisterRequired(path)
            field = answer.get("field", "") if isinstance(answer, dict) else ""
            raise PortalRejected(status, str(detail), str(field or ""))
        if not isinstance(answer, dict):
            raise PortalUnavailable(f"{path}: HTTP {status} with a body that is not a JSON object")
        return answer


def _control_absent(error: PortalUnavailable | PortalRejected) -> bool:
    """Whether a heartbeat's failure at the node-control server says the server is not there, so the
    heartbeat was not taken and may go to the portal's main address: no connection made (refused, no such
    host, no answer to the connect, no TLS or proxy tunnel to it), a proxy's 502/503 without
    ``Retry-After``, or no such route (404, 405)."""
    if isinstance(error, PortalRejected):
        return error.status in (404, 405)
    if error.status is not None:
        return error.status in (502, 503) and error.retry_after_s is None
    cause = error.__cause__
    errors = requests.exceptions
    if isinstance(cause, errors.ConnectTimeout | errors.SSLError | errors.ProxyError):
        return True
    connecting = isinstance(cause, requests.ConnectionError) and cause.args
    reason = getattr(cause.args[0], "reason", None) if connecting else None  # urllib3's MaxRetryError's
    return isinstance(reason, ConnectTimeoutError)  # refused, no such host (subclasses), no answer


def _usable_control_url(url: object, base_url: str) -> str:
    """``url`` without its trailing slash if it is a server root this agent sends its token to: http(s), a
    host, no user (it would replace the token), path, query or fragment, a valid port, and https where
    ``base_url`` is (the token never crosses the network in clear); else ""."""
    if not isinstance(url, str):
        return ""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number or out of range
    except ValueError:
        return ""
    fit = (parts.scheme in ("http", "https") and parts.hostname and "@" not in parts.netloc
           and not parts.path.strip("/") and not parts.query and not parts.fragment
           and not (base_url.startswith("https://") and parts.scheme == "http"))
    return url.rstrip("/") if fit else ""


def _retry_after_s(value: str | None) -> float | None:
    """A ``Retry-After`` of seconds, at most ``MAX_RETRY_AFTER_S``; None when absent or not seconds (an HTTP
    date, which the portal never sends: the next pass tries again)."""
    try:
        seconds = float(value or "")
    except ValueError:
        return None
    return min(seconds, MAX_RETRY_AFTER_S) if seconds > 0 else None
