"""``rota checkpoint [JOB]``: report that a running job has just saved its work (docs/cli.md).

Called by the job itself after it saved a checkpoint (``JOB`` defaults to ``$ROTA_JOB_ID``, which every
job has; the job needs ``ROTA_URL`` and ``ROTA_TOKEN`` of a member of its team in its environment), or by a
member of the team. A later preemption then loses only the work after it, and that work is credited back.
Jobs on a node can instead touch ``$ROTA_CHECKPOINT_FILE``, which their node agent watches.
"""

import argparse
import os

from portal.cli import CliError, client_from_config, print_json


def add_parser(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("checkpoint", parents=[common],
                       help="report that a running job just saved its work (default: $ROTA_JOB_ID)")
    p.add_argument("id", nargs="?", help="the job (default: $ROTA_JOB_ID, set inside every job)")


def job_id_of(args) -> int:
    """The job named on the command line, else the one this command runs in."""
    value = args.id if args.id is not None else os.environ.get("ROTA_JOB_ID")
    if value is None:
        raise CliError("name the job (rota checkpoint JOB), or run it inside a job, where ROTA_JOB_ID is set")
    try:
        job_id = int(value)
    except ValueError:
        raise CliError(f"JOB must be a job number; got {value!r}") from None
    if job_id < 1:
        raise CliError(f"JOB must be a job number (1 or more); got {job_id}")
    return job_id


def cmd_checkpoint(args) -> int:
    body = client_from_config().post(f"/api/v1/jobs/{job_id_of(args)}/checkpoint/")
    if args.json:
        print_json(body)
    else:
        print(f"job {body['job_id']}: checkpoint recorded at {body['last_checkpoint_at']} "
              f"(attempt {body['attempt']})")
    return 0
