"""``rota service``: an inference service as a whole — its replicas, traffic and autoscale (``show``), its
replica count changed while it runs (``scale``), and its autoscale (``autoscale``)."""


from portal.cli_client import CliError, client_from_config, print_json, print_table


def add_parsers(sub, common) -> None:
    """The ``service`` command and its subcommands."""
    p = sub.add_parser("service", parents=[common], help="an inference service: show, scale, autoscale")
    actions = p.add_subparsers(dest="service_cmd", required=True)
    q = actions.add_parser("show", parents=[common], help="replicas (node, address, health, restarts), traffic")
    q.add_argument("service", help="TEAM/SERVICE")
    q = actions.add_parser("scale", parents=[common], help="run this many replicas (down: the highest-numbered "
                                                           "are cancelled)")
    q.add_argument("service", help="TEAM/SERVICE")
    q.add_argument("replicas", type=int)
    q = actions.add_parser("autoscale", parents=[common], help="scale between --min and --max on request rate")
    q.add_argument("service", help="TEAM/SERVICE")
    q.add_argument("--off", action="store_true", help="turn autoscale off")
    q.add_argument("--min", type=int, default=1, dest="min_replicas")
    q.add_argument("--max", type=int, dest="max_replicas")
    q.add_argument("--target-rps", type=float, default=10.0, help="requests per second per replica (default 10)")
    q.add_argument("--scale-down-delay", type=int, default=60, dest="scale_down_delay_s",
                   help="seconds of low traffic before scaling down (default 60)")


def _path(name: str) -> str:
    team, _, service = name.partition("/")
    if not team or not service or "/" in service:
        raise CliError(f"service: write it as TEAM/SERVICE, not {name!r}")
    return f"/api/v1/services/{team}/{service}/"


def _seconds(value) -> str:
    return f"{value * 1000:.1f} ms" if value is not None else "-"


def cmd_service(args) -> int:
    client = client_from_config()
    path = _path(args.service)
    if args.service_cmd == "scale":
        body = client.post(f"{path}scale/", {"replicas": args.replicas})
        if args.json:
            print_json(body)
        else:
            print(f"{args.service}: {body['before']} -> {body['replicas']} replicas; started "
                  f"{', '.join(f'#{i}' for i in body['started']) or 'none'}; cancelled "
                  f"{', '.join(f'#{i}' for i in body['cancelled']) or 'none'}")
        return 0
    if args.service_cmd == "autoscale":
        if not args.off and args.max_replicas is None:
            raise CliError("autoscale: give --max (and --min, --target-rps), or --off")
        data = {"enabled": not args.off, "min_replicas": args.min_replicas,
                "max_replicas": args.max_replicas or args.min_replicas, "target_rps": args.target_rps,
                "scale_down_delay_s": args.scale_down_delay_s}
        body = client.request("PUT", f"{path}autoscale/", json=data)
        if args.json:
            print_json(body)
        elif body["enabled"]:
            print(f"{args.service}: autoscale {body['min_replicas']}-{body['max_replicas']} replicas at "
                  f"{body['target_rps']:g} requests/s each (down after {body['scale_down_delay_s']} s)")
        else:
            print(f"{args.service}: autoscale off")
        return 0
    body = client.get(path)
    if args.json:
        print_json(body)
        return 0
    traffic, scale = body["traffic"], body["autoscale"]
    print(f"service {body['team']}/{body['service']}: {len(body['replicas'])} replicas, {body['keys_live']} live keys")
    print_table(["JOB", "NAME", "STATE", "NODE", "ADDRESS", "HEALTH", "RESTARTS"],
                [[r["id"], r["name"], r["state"], r["node"] or "-", r["address"] or "-", r["health"] or "-",
                  r["restarts"]] for r in body["replicas"]])
    latency = traffic["latency_s"]
    print(f"traffic: {traffic['requests']} requests, {traffic['failed']} failed, mean "
          f"{_seconds(traffic['mean_latency_s'])}, p50 {_seconds(latency['p50'])}, p95 {_seconds(latency['p95'])}, "
          f"p99 {_seconds(latency['p99'])}")
    if scale["enabled"]:
        print(f"autoscale: {scale['min_replicas']}-{scale['max_replicas']} replicas at {scale['target_rps']:g} "
              f"requests/s each; last: {scale['last_decision'] or 'not evaluated yet'}")
    else:
        print("autoscale: off")
    return 0



