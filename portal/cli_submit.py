"""``rota submit`` and ``rota templates``: a job from flags, a template or a batch script's ``#ROTA`` lines."""

from __future__ import annotations

import argparse
import math
import shlex
from pathlib import Path

from portal.cli_client import ApiError, Client, CliError, client_from_config, print_json, print_table

SCRIPT_PREFIX = "#ROTA"
# CLI flag (dest) -> API field for ``rota submit``.
SUBMIT_FIELDS = {
    "name": "name", "team": "team", "kind": "kind", "gpus": "gpus", "gpu_fraction": "gpu_fraction",
    "gpu_model": "gpu_model", "gpu_memory_gb": "gpu_memory_gb", "cpus": "cpus", "memory_gb": "memory_gb",
    "time_limit": "time_limit_minutes",
    "priority_class": "priority_class", "nodes": "nodes", "pool": "pool", "image": "image",
    "array": "array",
    "depends": "dependency", "max_retries": "max_retries", "retry_on": "retry_on", "retry_backoff": "retry_backoff_s",
}



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
    elif template.get("command") or values.get("kind") == "notebook":  # a notebook's blank command: JupyterLab
        command_text = template.get("command", "")
    else:
        raise CliError("command: give a command after `--` or a script file")
    data = {**template, **{api: values[flag] for flag, api in SUBMIT_FIELDS.items() if values.get(flag) is not None}}
    data["command"] = command_text
    fallback = command[0] if command else (args.template if getattr(args, "template", None) else "job")
    data.setdefault("name", fallback.rsplit("/", 1)[-1][:100])
    env = service_env(data, template, getattr(args, "env", None) or [], getattr(args, "health_path", None))
    if env:
        data["env"] = env
    replicas = getattr(args, "replicas", None)
    if replicas is not None:
        return submit_replicas(args, data, replicas)
    job = client_from_config().post("/api/v1/jobs/", data)
    if args.json:
        print_json(job)
    elif "ids" in job:  # an array: its tasks' ids
        print(f"Submitted array {job['array_id']} ({job['name']}): {job['size']} tasks, jobs "
              f"{job['ids'][0]}-{job['ids'][-1]}, to team {job['team']}")
    else:
        print(f"Submitted job {job['id']} ({job['name']}) to team {job['team']}: {job['state']}")
    return 0


def service_env(data: dict, template: dict, pairs: list[str], health_path: str | None) -> dict:
    """The job's environment: the template's, then each ``--env KEY=VALUE``, then an inference service's
    ``--health-path`` (``ROTA_HEALTH_PATH``, which its node probes)."""
    env = dict(template.get("env") or {})
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise CliError(f"env: give KEY=VALUE; got {pair!r}")
        env[key] = value
    if health_path is not None:
        if data.get("kind") != "inference":
            raise CliError("health_path: only an inference service (--kind inference) is probed")
        if not health_path.startswith("/"):
            raise CliError(f"health_path: must start with /; got {health_path!r}")
        env["ROTA_HEALTH_PATH"] = health_path
    return env


def submit_replicas(args, data: dict, replicas: int) -> int:
    """An inference service of ``replicas`` jobs ``<name>-1`` … ``<name>-N``: the first submitted, the others
    made by scaling the service to N (``POST /api/v1/services/<team>/<name>/scale/``), as its page does."""
    if data.get("kind") != "inference":
        raise CliError("replicas: only an inference service (--kind inference) has replicas")
    if replicas < 1:
        raise CliError(f"replicas: must be at least 1; got {replicas}")  # the most: the portal's limit (scale)
    client = client_from_config()
    service = data["name"][:96]
    first = client.post("/api/v1/jobs/", {**data, "name": f"{service}-1"})
    scaled = {"started": []}
    if replicas > 1:
        try:
            scaled = client.post(f"/api/v1/services/{first['team']}/{service}/scale/", {"replicas": replicas})
        except ApiError:  # all or none: the first replica goes too
            client.post(f"/api/v1/jobs/{first['id']}/cancel/")
            raise
    if args.json:
        print_json({"service": service, "team": first["team"], "ids": [first["id"], *scaled["started"]]})
    else:
        ids = ", ".join(f"#{i}" for i in [first["id"], *scaled["started"]])
        print(f"Submitted inference service {first['team']}/{service}: {replicas} replicas ({ids})")
    return 0


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
    p.add_argument("--env", action="append", metavar="KEY=VALUE", help="an environment variable of the job "
                                                                     "(repeat for more)")
    p.add_argument("--replicas", type=int, help="an inference service: run this many replicas (NAME-1 … NAME-N)")
    p.add_argument("--health-path", help="an inference service: the path its node probes, e.g. /health")
    p.add_argument("--array", help='a job array: one task per index, e.g. 0-99, 1,3,5 or 0-99%%8 (at most 8 at once)')
