"""``rota array`` and ``rota watch``: job arrays as one, and following a job or an array until it ends."""

import time

from portal.cli import FINAL, client_from_config, print_json, print_table


def cmd_array(args) -> int:
    client = client_from_config()
    body = (client.post(f"/api/v1/arrays/{args.id}/cancel/") if args.cancel
            else client.get(f"/api/v1/arrays/{args.id}/"))
    if args.json:
        print_json(body)
        return 0
    cap = f", at most {body['max_running']} at once" if body["max_running"] else ""
    print(f"array {body['array_id']} {body['name']} [{body['spec']}]: {body['size']} tasks{cap}, team {body['team']}")
    if args.cancel:
        print(f"cancel requested for {body['cancelled']} task{'s' if body['cancelled'] != 1 else ''}")
    print_table(["STATE", "TASKS"], [[state, n] for state, n in sorted(body["counts"].items())])
    return 0


def _counts_line(counts: dict) -> str:
    return ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))


def cmd_watch(args) -> int:
    """Print a job's transitions (and changes of why it waits) as they happen, until it ends; or an array's
    tasks by state whenever they change, until every task ended. Exit status 0 when everything succeeded."""
    client = client_from_config()
    if args.array:
        last = None
        while True:
            body = client.get(f"/api/v1/arrays/{args.id}/")
            counts = body["counts"]
            if counts != last:
                print_json({"array_id": args.id, "counts": counts}) if args.json else print(
                    f"array {args.id}: {_counts_line(counts)}", flush=True)
                last = counts
            if not set(counts) - set(FINAL):
                return 0 if set(counts) == {"succeeded"} else 1
            time.sleep(args.interval)
    seen, reason = 0, None
    while True:
        job = client.get(f"/api/v1/jobs/{args.id}/")
        for t in job["transitions"][seen:]:
            print_json(t) if args.json else print(f"{t['at']}  {t['to_state']:<10} {t['cause']}", flush=True)
        seen = len(job["transitions"])
        now = job.get("pending_reason")
        if now and now != reason and job["state"] not in FINAL and not args.json:
            print(f"{'':<27}  waiting    {now['code']}: {now['message']}", flush=True)
        reason = now
        if job["state"] in FINAL:
            return 0 if job["state"] == "succeeded" else 1
        time.sleep(args.interval)
