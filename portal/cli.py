"""The ``rota`` command line: submit, watch and control GPU work through the REST API with a token.

Plain Python (argparse + requests), no Django: it talks to a portal over HTTP like any other client.
Configuration comes from ``ROTA_URL`` / ``ROTA_TOKEN`` or from ``~/.config/rota/config.json``, which
``rota login`` writes (mode 0600). Every command takes ``--json`` for machine-readable output. API errors
are printed as ``error: <field>: <message>`` and exit with status 1.
"""

from __future__ import annotations

import argparse
import getpass
import json
import math
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import requests

TIMEOUT_S = 30
FOLLOW_INTERVAL_S = 2.0
SCRIPT_PREFIX = "#ROTA"
PAGE = 200  # jobs per API page
NODE_PAGE = 1000  # nodes per API page (the portal's largest)
MAX_QUEUE = 10_000  # the most active jobs `rota queue` reads

# CLI flag (dest) -> API field for ``rota submit``.
SUBMIT_FIELDS = {
    "name": "name", "team": "team", "kind": "kind", "gpus": "gpus", "gpu_fraction": "gpu_fraction",
    "gpu_model": "gpu_model", "gpu_memory_gb": "gpu_memory_gb", "cpus": "cpus", "memory_gb": "memory_gb",
    "time_limit": "time_limit_minutes",
    "priority_class": "priority_class", "nodes": "nodes", "pool": "pool", "image": "image",
    "array": "array",
    "depends": "dependency", "max_retries": "max_retries", "retry_on": "retry_on", "retry_backoff": "retry_backoff_s",
}


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


def cmd_login(args) -> int:
    url = args.url or load_config().get("url")
    if not url:
        raise CliError("--url is required")
    username = args.username or input("username: ")
    password = os.environ.get("ROTA_PASSWORD") or getpass.getpass(f"password for {username}: ")
    body = Client(url, None).request("POST", "/api/v1/auth/token/", json={"username": username, "password": password})
    path = save_config(url, body["token"])
    if args.json:
        print_json({"url": url, "username": username, "config": str(path)})
    else:
        print(f"logged in to {url} as {username}; token saved in {path}")
    return 0


def parse_script(text: str) -> tuple[list[str], str]:
    """The ``#ROTA --flag value`` header lines of a script (before its first non-comment line), and the
    script itself as the command. A ``#!`` line and other comments may appear among the header lines."""
    flags: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(SCRIPT_PREFIX):
            try:
                flags.extend(shlex.split(stripped[len(SCRIPT_PREFIX):], comments=True))
            except ValueError as exc:  # an unclosed quote
                raise CliError(f"script header: {exc.args[0].lower()} in {stripped!r}") from None
        elif stripped and not stripped.startswith("#"):
            break
    return flags, text


def find_template(client: Client, name: str, team: str | None) -> dict:
    """The saved template ``name`` of ``team`` (or of whichever of your teams has one by that name)."""
    teams = [team] if team else [t["name"] for t in client.get("/api/v1/teams/")]
    found = [t | {"team": tm} for tm in teams for t in client.get(f"/api/v1/teams/{tm}/templates/")
             if t["name"] == name]
    if not found:
        raise CliError(f"template: no template named {name!r} in {', '.join(teams) or 'your teams'}")
    if len(found) > 1:
        raise CliError(f"template: {name!r} exists in {', '.join(t['team'] for t in found)}; choose with --team")
    return found[0]


def template_request(name: str, team: str | None) -> dict:
    """A saved template's values as a jobs-API request (the submit form's names mapped to the API's)."""
    template = find_template(client_from_config(), name, team)
    values = dict(template["values"])
    data = {k: v for k, v in values.items() if k not in ("replicas", "health_path", "node_labels", "preemptible")}
    data.update(team=template["team"], kind=template["kind"])
    if values.get("node_labels"):
        data["node_labels"] = dict(p.strip().split("=", 1) for p in values["node_labels"].split(",") if "=" in p)
    if values.get("preemptible") in ("yes", "no"):
        data["preemptible"] = values["preemptible"] == "yes"
    if values.get("health_path") and template["kind"] == "inference":
        data["env"] = {"ROTA_HEALTH_PATH": values["health_path"]}
    return data


def cmd_templates(args) -> int:
    """Saved job templates of your teams (or one)."""
    client = client_from_config()
    teams = [args.team] if args.team else [t["name"] for t in client.get("/api/v1/teams/")]
    rows = [t | {"team": team} for team in teams for t in client.get(f"/api/v1/teams/{team}/templates/")]
    if args.json:
        print_json(rows)
        return 0
    print_table(["TEAM", "NAME", "KIND", "GPUS", "GPU_MODEL", "COMMAND"],
                [[t["team"], t["name"], t["kind"], t["values"].get("gpus", ""), t["values"].get("gpu_model", ""),
                  str(t["values"].get("command", "")).splitlines()[0][:40] if t["values"].get("command") else ""]
                 for t in rows])
    return 0


def cmd_submit(args, parser: argparse.ArgumentParser) -> int:
    command = list(args.command or [])
    if command and command[0] == "--":
        command = command[1:]
    values = vars(args)
    script_text = None
    if args.script and args.command:
        raise CliError(f"arguments after the script {args.script} are not passed to it: put them in the script, "
                       "or give a command after `--` instead of a script")
    if args.script:
        path = Path(args.script)
        try:
            script_text = path.read_text()
        except OSError as exc:
            raise CliError(f"cannot read script {path}: {exc}") from None
        header, script_text = parse_script(script_text)
        # Header lines give defaults; flags on the command line win.
        known, extra = parser.parse_known_args(header)
        if extra:
            raise CliError(f"script header: unrecognized arguments: {' '.join(extra)}")
        defaults = vars(known)
        values = {k: (values[k] if values.get(k) is not None else defaults.get(k)) for k in SUBMIT_FIELDS}
        if not values.get("name"):
            values["name"] = path.stem
    template = template_request(args.template, values.get("team")) if getattr(args, "template", None) else {}
    if script_text is not None:
        command_text = script_text
    elif command:
        command_text = shlex.join(command)
    elif template.get("command"):
        command_text = template["command"]
    else:
        raise CliError("command: give a command after `--` or a script file")
    data = {**template, **{api: values[flag] for flag, api in SUBMIT_FIELDS.items() if values.get(flag) is not None}}
    data["command"] = command_text
    fallback = command[0] if command else (args.template if getattr(args, "template", None) else "job")
    data.setdefault("name", fallback.rsplit("/", 1)[-1][:100])
    job = client_from_config().post("/api/v1/jobs/", data)
    if args.json:
        print_json(job)
    elif "ids" in job:  # an array: its tasks' ids
        print(f"Submitted array {job['array_id']} ({job['name']}): {job['size']} tasks, jobs "
              f"{job['ids'][0]}-{job['ids'][-1]}, to team {job['team']}")
    else:
        print(f"Submitted job {job['id']} ({job['name']}) to team {job['team']}: {job['state']}")
    return 0


def fetch_jobs(client: Client, most: int, **params) -> tuple[list[dict], int]:
    """Up to ``most`` jobs matching ``params``, newest first, read page by page; and how many match."""
    jobs: list[dict] = []
    count = 0
    while len(jobs) < most:
        body = client.get("/api/v1/jobs/", limit=min(PAGE, most - len(jobs)), offset=len(jobs), **params)
        count = body.get("count", 0)
        jobs.extend(body["results"])
        if not body.get("next") or not body["results"]:
            break
    return jobs, count


def cmd_queue(args) -> int:
    client = client_from_config()
    # The filter runs on the portal: active jobs by default (every one of them, however many finished
    # since), finished ones only when asked, the newest --limit.
    state = args.state or (None if args.all else "active")
    most = args.limit if (args.all or args.state) else MAX_QUEUE
    if args.team and args.team not in {t["name"] for t in client.get("/api/v1/teams/")}:
        raise CliError("No such team")  # as `rota share` says, and the portal's own answer (no names leak)
    jobs, count = fetch_jobs(client, most, state=state, team=args.team)
    if count > len(jobs):
        print(f"showing the newest {len(jobs)} of {count} jobs (see --limit)", file=sys.stderr)
    if args.json:
        print_json(jobs)
        return 0
    print_table(
        ["ID", "NAME", "TEAM", "KIND", "STATE", "GPUS", "REASON"],
        [[j["id"], j["name"][:30], j["team"], j["kind"], j["state"], gpus_label(j), reason_label(j)] for j in jobs],
    )
    return 0


def cmd_show(args) -> int:
    job = client_from_config().get(f"/api/v1/jobs/{args.id}/")
    if args.json:
        print_json(job)
        return 0
    rows = [
        ("id", job["id"]), ("name", job["name"]), ("team", job["team"]), ("user", job["submitted_by"]),
        ("kind", job["kind"]), ("state", job["state"]), ("image", job["image"]), ("gpus", gpus_label(job)),
        ("cpus", job["cpus"]), ("memory_gb", job["memory_gb"]), ("priority_class", job["priority_class"]),
        ("preemptible", job["preemptible"]), ("time_limit_minutes", job["time_limit_minutes"]),
        ("queue_position", job["queue_position"]), ("estimated_start", job["estimated_start"]),
        ("created_at", job["created_at"]), ("started_at", job["started_at"]),
        ("finished_at", job["finished_at"]), ("exit_code", job["exit_code"]),
    ]
    if job.get("failure_reason"):
        rows.append(("failure_reason", f"{job['failure_reason']}: {job['failure_message']}"))
    if job.get("restarts"):
        rows.append(("restarts", job["restarts"]))
    if job.get("array_id") is not None:
        rows.append(("array", f"task {job['array_index']} of array {job['array_id']}"))
    if job.get("dependency"):
        rows.append(("dependency", job["dependency"]))
    if job.get("max_retries") or job.get("retry_on"):
        rows.append(("retries", f"{job['retries']} of {job['max_retries']} on {', '.join(job['retry_on'])}"))
    for attempt in job.get("attempts") or []:
        if len(job["attempts"]) > 1:
            rows.append((f"attempt {attempt['attempt']}", f"{','.join(attempt['nodes']) or '-'}: "
                                                           f"{attempt['ended'] or 'current'}"))
    if job.get("connect_url"):
        rows.append(("connect_url", job["connect_url"]))
    reason = job.get("pending_reason")
    if reason:
        rows.append(("pending_reason", f"{reason['code']}: {reason['message']}"))
    for alloc in job.get("allocations") or []:
        rows.append(("allocation", f"{alloc['node']} gpu{alloc['gpu_index']} {alloc['gpu_uuid']} ({alloc['share']})"))
    for key, value in rows:
        print(f"{key + ':':<20}{'' if value is None else value}")
    print("command:")
    for line in job["command"].splitlines():
        print(f"  {line}")
    return 0


def cmd_logs(args) -> int:
    client = client_from_config()
    offset = 0
    chunks = []
    while True:
        body = client.get(f"/api/v1/jobs/{args.id}/logs/", offset=offset)
        if body["content"]:
            if args.json:
                chunks.append(body["content"])
            else:
                sys.stdout.write(body["content"])
                sys.stdout.flush()
        offset = body["size"]
        if not args.follow or body["finished"]:
            break
        time.sleep(args.interval)
    if args.json:
        print_json({"job_id": body["job_id"], "attempt": body["attempt"], "size": body["size"],
                    "truncated": body["truncated"], "finished": body["finished"], "content": "".join(chunks)})
    return 0


FINAL = ("succeeded", "failed", "cancelled", "timed-out", "node-lost")


def cmd_action(args) -> int:
    job = client_from_config().post(f"/api/v1/jobs/{args.id}/{args.action}/")
    if args.json:
        print_json(job)
    elif args.action == "cancel" and job["state"] in FINAL and job["state"] != "cancelled":
        print(f"job {job['id']}: already {job['state']}; nothing to cancel")  # cancel leaves an ended job be
    elif args.action == "cancel" and job["state"] not in FINAL:
        print(f"job {job['id']}: cancel requested ({job['state']}; it ends once its processes are stopped)")
    else:
        print(f"job {job['id']}: {job['state']}")
    return 0


def fetch_nodes(client: Client, **params) -> list[dict]:
    """Every node matching ``params``, read page by page."""
    nodes: list[dict] = []
    while True:
        body = client.get("/api/v1/nodes/", limit=NODE_PAGE, offset=len(nodes), **params)
        nodes.extend(body["results"])
        if not body.get("next") or not body["results"]:
            return nodes


def cmd_nodes(args) -> int:
    nodes = fetch_nodes(client_from_config(), pool=args.pool, state=args.state)
    if args.json:
        print_json(nodes)
        return 0
    rows = []
    for n in nodes:
        models = sorted({g["model"] for g in n["gpus"]})
        healthy = sum(1 for g in n["gpus"] if g["healthy"])
        executor = n.get("executor") or "?"
        if executor and not (n.get("executor_info") or {}).get("isolates"):
            executor += " (NOT isolated)"
        rows.append([n["name"], n["pool"], n["state"], f"{healthy}/{len(n['gpus'])}", ",".join(models), executor,
                     n["state_reason"][:40]])
    print_table(["NAME", "POOL", "STATE", "GPUS", "MODELS", "EXECUTOR", "REASON"], rows)
    return 0


def cmd_share(args) -> int:
    """Fair-share standing of your teams (or one), like Slurm's sshare, then quota per GPU model."""
    client = client_from_config()
    names = [args.team] if args.team else [t["name"] for t in client.get("/api/v1/teams/")]
    bodies = [client.get(f"/api/v1/teams/{name}/share/") for name in names]
    if args.json:
        print_json(bodies)
        return 0
    print_table(
        ["TEAM", "ENTITLEMENT", "NORMSHARES", "RAWUSAGE", "NORMUSAGE", "FAIRSHARE", "RANK"],
        [[b["share"]["team"], f"{b['share']['entitlement']:g}", f"{b['share']['norm_shares']:.3f}",
          f"{b['share']['raw_usage']:.0f}", f"{b['share']['norm_usage']:.3f}", f"{b['share']['fair_share']:.3f}",
          f"{b['share']['rank']}/{b['teams']}"] for b in bodies],
    )
    rows = [[b["share"]["team"], q["gpu_model"], q["guaranteed"], q["limit"] if q["limit"] is not None else "-",
             q["in_use"], q["borrowed"], q["lent"]] for b in bodies for q in b["quotas"]]
    if rows:
        print()
        print_table(["TEAM", "GPU_MODEL", "GUARANTEED", "LIMIT", "IN_USE", "BORROWED", "LENT"], rows)
    return 0


# --- parser -----------------------------------------------------------------------------------------


def finite_float(text: str) -> float:
    """A number argparse accepts for a fraction: finite (nan and inf are not amounts)."""
    value = float(text)
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number; got {text}")
    return value


def add_submit_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--name")
    p.add_argument("--team")
    p.add_argument("--kind", help="training, inference, notebook, data-processing, evaluation, agent")
    p.add_argument("--gpus", type=int)
    p.add_argument("--gpu-fraction", type=finite_float, help="share of one GPU, e.g. 0.25")
    p.add_argument("--gpu-model")
    p.add_argument("--gpu-memory-gb", type=int, help="GPU memory the job needs (with --gpu-fraction: in its share)")
    p.add_argument("--cpus", type=int)
    p.add_argument("--memory-gb", type=int)
    p.add_argument("--time-limit", type=int, help="minutes")
    p.add_argument("--priority-class")
    p.add_argument("--nodes", type=int)
    p.add_argument("--pool")
    p.add_argument("--image", help="container image, registry first (localhost/rota/python:3.11); default: the "
                                   "kind's")
    p.add_argument("--depends", "--dependency", dest="depends",
                   help="start after other jobs end, as Slurm writes it: afterok:12:13,afterany:7_*")
    p.add_argument("--max-retries", type=int, help="queue it again at most this many times after an end of --retry-on")
    p.add_argument("--retry-on", type=lambda text: [k.strip() for k in text.split(",") if k.strip()],
                   help="ends to retry, comma-separated: node-lost, failed, start-failed, timed-out")
    p.add_argument("--retry-backoff", type=int, help="seconds before the first retry (doubling after)")
    p.add_argument("--array", help='a job array: one task per index, e.g. 0-99, 1,3,5 or 0-99%%8 (at most 8 at once)')


def build_parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(add_help=False)
    top.add_argument("--json", action="store_true", help="machine-readable output")
    # A subcommand's --json must not reset one given before the subcommand (`rota --json queue`).
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output")
    parser = argparse.ArgumentParser(prog="rota", description="Submit and watch GPU work on a Rota portal.",
                                     parents=[top])
    sub = parser.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("login", parents=[common], help="get an API token and save it")
    p.add_argument("--url")
    p.add_argument("--username")

    p = sub.add_parser("submit", parents=[common], help="submit a job: flags and `-- command`, or a script")
    add_submit_flags(p)
    p.add_argument("--template", help="start from your team's saved template of this name (flags win)")
    p.add_argument("script", nargs="?", help="a script whose #ROTA header lines give the flags")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- command to run")

    p = sub.add_parser("queue", parents=[common], help="active jobs you may see, with reasons")
    p.add_argument("--all", action="store_true", help="include finished jobs (the newest --limit)")
    p.add_argument("--state", help="one state (pending, running, …), or active / finished")
    p.add_argument("--team")
    p.add_argument("--limit", type=int, default=PAGE, help=f"with --all or --state: at most this many (default {PAGE})")

    p = sub.add_parser("show", parents=[common], help="one job in detail")
    p.add_argument("id", type=int)

    p = sub.add_parser("logs", parents=[common], help="a job's output")
    p.add_argument("id", type=int)
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until the job finishes")
    p.add_argument("--interval", type=float, default=FOLLOW_INTERVAL_S, help=argparse.SUPPRESS)

    for action in ("cancel", "hold", "release"):
        p = sub.add_parser(action, parents=[common], help=f"{action} a job")
        p.add_argument("id", type=int)
        p.set_defaults(action=action)

    p = sub.add_parser("array", parents=[common], help="a job array: its tasks by state; --cancel cancels them")
    p.add_argument("id", type=int)
    p.add_argument("--cancel", action="store_true", help="cancel every task that has not ended")

    p = sub.add_parser("watch", parents=[common], help="follow a job (or --array) until it ends; exit 0 if it "
                                                       "succeeded")
    p.add_argument("id", type=int)
    p.add_argument("--array", action="store_true", help="ID is an array: print its tasks by state as they change")
    p.add_argument("--interval", type=float, default=FOLLOW_INTERVAL_S, help=argparse.SUPPRESS)

    p = sub.add_parser("nodes", parents=[common], help="nodes, their state and GPUs")
    p.add_argument("--pool", help="only this pool's nodes")
    p.add_argument("--state", help="only nodes in this state (ready, draining, drained, down, unhealthy)")

    p = sub.add_parser("share", parents=[common], help="fair-share standing and quota of your teams (like sshare)")
    p.add_argument("team", nargs="?", help="one team (default: every team you may see)")

    p = sub.add_parser("templates", parents=[common], help="saved job templates of your teams")
    p.add_argument("team", nargs="?", help="one team (default: every team you may see)")
    from portal import cli_checkpoint  # (it imports this module)

    cli_checkpoint.add_parser(sub, common)
    return parser


def _header_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="#ROTA", exit_on_error=False, add_help=False)
    add_submit_flags(p)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``rota`` command; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    # A submit's command may start with `--`: split it off before argparse sees it.
    command: list[str] = []
    if argv and argv[0] == "submit" and "--" in argv:
        cut = argv.index("--")
        argv, command = argv[:cut], argv[cut + 1:]
    args = parser.parse_args(argv)
    if args.cmd == "queue" and args.limit < 1:
        parser.error("--limit must be at least 1")
    if args.cmd == "submit" and command:
        if args.script and Path(args.script).is_file() and not args.command:
            print(f"error: {args.script} is a script: it takes no arguments after `--` (put them in the script), "
                  "and a command after `--` needs no script", file=sys.stderr)
            return 1
        if args.script:  # the positional was the first word of a command, not a script
            command = [args.script, *(args.command or []), *command]
            args.script = None
        args.command = command
    from portal import cli_checkpoint, cli_flow  # (they import this module)

    handlers = {
        "login": cmd_login, "queue": cmd_queue, "show": cmd_show, "logs": cmd_logs, "nodes": cmd_nodes,
        "share": cmd_share, "templates": cmd_templates,
        "cancel": cmd_action, "hold": cmd_action, "release": cmd_action,
        "array": cli_flow.cmd_array, "watch": cli_flow.cmd_watch, "checkpoint": cli_checkpoint.cmd_checkpoint,
    }
    try:
        if args.cmd == "submit":
            return cmd_submit(args, _header_parser())
        return handlers[args.cmd](args)
    except argparse.ArgumentError as exc:
        print(f"error: script header: {exc}", file=sys.stderr)
        return 1
    except CliError as exc:
        print(exc if str(exc).startswith("error:") else f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except EOFError:
        print("error: no input to read (standard input is closed); give --username and ROTA_PASSWORD",
              file=sys.stderr)
        return 1
    except BrokenPipeError:  # `rota queue | head`: the reader left; say nothing more
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
