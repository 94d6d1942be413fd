"""The ``rota`` command line's plumbing: configuration (``ROTA_URL`` / ``ROTA_TOKEN`` or the config file that
``rota login`` writes), the HTTP client with the API's error format, and table/JSON output. Commands live in
``portal.cli`` and its sibling modules."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import requests

TIMEOUT_S = 30

class CliError(Exception):
    """A failure to report as ``error: …`` with exit status 1."""


# --- configuration ---------------------------------------------------------------------------------


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "rota" / "config.json"


def load_config() -> dict[str, str]:
    """URL and token: the environment wins over the config file."""
    config: dict[str, str] = {}
    path = config_path()
    if path.exists():
        try:
            config = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise CliError(f"cannot read {path}: {exc}") from None
        if not isinstance(config, dict):
            raise CliError(f"cannot read {path}: expected a JSON object with url and token; run `rota login`")
    if os.environ.get("ROTA_URL"):
        config["url"] = os.environ["ROTA_URL"]
    if os.environ.get("ROTA_TOKEN"):
        config["token"] = os.environ["ROTA_TOKEN"]
    return config


def save_config(url: str, token: str) -> Path:
    """Write the config file readable by its owner only (it holds a credential)."""
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump({"url": url, "token": token}, fh)
    os.chmod(path, 0o600)
    return path


# --- HTTP -------------------------------------------------------------------------------------------


def format_api_error(body: Any, status: int) -> str:
    """``field: message`` lines from the API's error body ({detail, errors: {field: [msg]}})."""
    if isinstance(body, dict):
        errors = body.get("errors")
        if isinstance(errors, dict) and errors:
            parts = []
            for field, msgs in errors.items():
                msgs = msgs if isinstance(msgs, list) else [msgs]
                text = "; ".join(str(m) for m in msgs)
                parts.append(text if field == "non_field_errors" else f"{field}: {text}")
            return "\n".join(f"error: {p}" for p in parts)
        if "detail" in body:
            return f"error: {body['detail']}"
        parts = [f"{k}: {v[0] if isinstance(v, list) and v else v}" for k, v in body.items()]
        if parts:
            return "\n".join(f"error: {p}" for p in parts)
    return f"error: HTTP {status}"


class Client:
    """A thin REST client: one method per HTTP verb, errors raised as ApiError."""

    def __init__(self, url: str, token: str | None):
        self.url = url.rstrip("/")
        self.session = requests.Session()
        if token:
            self.session.headers["Authorization"] = f"Token {token}"

    def request(self, method: str, path: str, **kwargs) -> Any:
        try:
            response = self.session.request(method, f"{self.url}{path}", timeout=TIMEOUT_S, **kwargs)
        except (requests.exceptions.MissingSchema, requests.exceptions.InvalidSchema,
                requests.exceptions.InvalidURL):
            raise CliError(f"{self.url} is not a portal URL: write it as http(s)://host[:port]") from None
        except requests.exceptions.Timeout:
            raise CliError(f"cannot reach {self.url}: no answer within {TIMEOUT_S} s") from None
        except requests.exceptions.SSLError:
            raise CliError(f"cannot reach {self.url}: the TLS handshake failed (http vs https?)") from None
        except requests.exceptions.ConnectionError as exc:
            text = str(exc)
            why = ("connection refused (is the portal running?)" if "refused" in text.lower() else
                   "the host name does not resolve" if "resolve" in text.lower() or "Name or service" in text else
                   "the connection failed")
            raise CliError(f"cannot reach {self.url}: {why}") from None
        except requests.RequestException as exc:
            raise CliError(f"cannot reach {self.url}: {type(exc).__name__}") from None
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.status_code >= 400:
            if body is None:  # not the API's JSON: a wrong URL, or another server
                raise ApiError(f"error: HTTP {response.status_code} from {self.url}{path}: is {self.url} the "
                               "portal's address?")
            raise ApiError(format_api_error(body, response.status_code))
        if not isinstance(body, dict | list):
            raise CliError(f"{self.url} did not answer like a Rota portal (HTTP {response.status_code}, "
                           f"{response.headers.get('Content-Type', 'no content type')}): check the URL")
        return body

    def get(self, path: str, **params) -> Any:
        return self.request("GET", path, params={k: v for k, v in params.items() if v is not None})

    def post(self, path: str, data: dict | None = None) -> Any:
        return self.request("POST", path, json=data or {})


class ApiError(CliError):
    """The API refused the request; the message is already formatted."""


def client_from_config() -> Client:
    config = load_config()
    if not config.get("url") or not config.get("token"):
        raise CliError("not logged in: run `rota login --url URL --username NAME` or set ROTA_URL and ROTA_TOKEN")
    return Client(config["url"], config["token"])


# --- output -----------------------------------------------------------------------------------------


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True, default=str))


def print_table(headers: list[str], rows: list[list[Any]]) -> None:
    cells = [[("" if c is None else str(c)) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def gpus_label(job: dict) -> str:
    model = job.get("gpu_model") or "any"
    count = job["gpu_fraction"] if job.get("gpu_fraction") else job.get("gpus")
    nodes = f"x{job['nodes']}n" if job.get("nodes") else ""
    return f"{count}{nodes}:{model}"


def reason_label(job: dict) -> str:
    """Like squeue's NODELIST(REASON): where it runs, or why it waits and its place in the queue."""
    if job.get("allocations"):
        return ",".join(sorted({a["node"] for a in job["allocations"]}))
    reason = job.get("pending_reason")
    if job.get("state") in ("pending", "held") and reason:
        label = f"({reason['code']})"
        if job.get("queue_position"):
            label += f" #{job['queue_position']}"
        return label
    if job.get("state") in ("pending", "held"):
        return "(Held)" if job["state"] == "held" else "(None)"
    return ""


# --- commands ---------------------------------------------------------------------------------------
