"""The ``rota`` command line: submit, watch and control GPU work through the REST API with a token.

Plain Python (argparse + requests), no Django: it talks to a portal over HTTP like any other client.
Configuration comes from ``ROTA_URL`` / ``ROTA_TOKEN`` or from ``~/.config/rota/config.json``, which
``rota login`` writes (mode 0600). Every command takes ``--json`` for machine-readable output. API errors
are printed as ``error: <field>: <message>`` and exit with status 1.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
import time
from pathlib import Path

from portal import cli_services
from portal.cli_client import (  # noqa: F401 (re-exported: commands beside this module import them from here)
    TIMEOUT_S,
    ApiError,
    Client,
    CliError,
    client_from_config,
    config_path,
    format_api_error,
    gpus_label,
    load_config,
    print_json,
    print_table,
    reason_label,
    save_config,
)
from portal.cli_submit import (  # noqa: F401 (re-exported)
    SCRIPT_PREFIX,
    SUBMIT_FIELDS,
    add_submit_flags,
    cmd_submit,
    cmd_templates,
    finite_float,
    parse_script,
)

FOLLOW_INTERVAL_S = 2.0
PAGE = 200  # jobs per API page
NODE_PAGE = 1000  # nodes per API page (the portal's largest)
MAX_QUEUE = 10_000  # the most active jobs `rota queue` reads


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
    if job.get("last_checkpoint_at"):
        rows.append(("last_checkpoint_at", job["last_checkpoint_at"]))
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
    # healthy of present GPUs (not free ones: the nodes API does not say which are held; `rota queue` does)
    print_table(["NAME", "POOL", "STATE", "GPUS(HEALTHY/TOTAL)", "MODELS", "EXECUTOR", "REASON"], rows)
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

    cli_services.add_parsers(sub, common)
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
        "array": cli_flow.cmd_array, "watch": cli_flow.cmd_watch, "service": cli_services.cmd_service,
        "checkpoint": cli_checkpoint.cmd_checkpoint,
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
