"""``python -m scheduler.sim``: replay a trace through the engine and print scheduling-quality figures.

    python -m scheduler.sim --trace ../shared/traces/philly-2017-pollux/philly.csv --format philly \\
        --cluster 72x8:v100 --start 2017-10-01 --end 2017-12-01 --compare fifo,slurm,tiresias,rota

Exit status: 0 when every replay was clean, 1 when any had invariant violations, quota violations or
decisions the simulator could not apply, 2 for bad arguments or unreadable input.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from scheduler.core.policies import PRESETS
from scheduler.sim.cluster import load_cluster
from scheduler.sim.experiment import Experiment
from scheduler.sim.loaders import FORMATS, Window, load_trace, parse_bound
from scheduler.sim.quotas import resolve_quotas
from scheduler.sim.report import format_json, format_table
from scheduler.sim.simulator import SimConfig
from scheduler.sim.trace import TraceError


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    parser = argparse.ArgumentParser(prog="python -m scheduler.sim", description=__doc__.split("\n")[0])
    parser.add_argument("--trace", required=True, help="trace file (CSV)")
    parser.add_argument(
        "--format", choices=FORMATS, default="generic", help="trace format (default: generic)"
    )
    parser.add_argument("--cluster", help="72x8:v100 style spec, a YAML file, or 'trace' (openb node list)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--policy", default="rota", help=f"one policy: {', '.join(PRESETS)} (default: rota)")
    which.add_argument("--compare", help="comma-separated policies to run side by side, e.g. fifo,rota")
    parser.add_argument("--quotas", help="team quotas (YAML); default: derived from the trace's GPU-seconds")
    parser.add_argument("--start", help="first submit time kept: a date (2017-10-09) or seconds")
    parser.add_argument("--end", help="submits before this are kept: a date or seconds")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--interval", type=float, default=60.0, help="seconds between scheduling cycles (60)")
    parser.add_argument(
        "--restart-cost", type=float, default=60.0, help="seconds a preempted job needs to resume (60)"
    )
    parser.add_argument(
        "--checkpoint-interval",
        type=float,
        help="seconds between checkpoints; preempted jobs lose work since the last one "
        "(default: they checkpoint on stop and lose none)",
    )
    parser.add_argument(
        "--heartbeat",
        type=float,
        default=600.0,
        help="while jobs wait, run a cycle at least this often even if nothing changed (600)",
    )
    parser.add_argument(
        "--exact-runtimes",
        action="store_true",
        help="tell the engine each job's true run time (as its time limit): oracle estimates",
    )
    parser.add_argument("--until", type=float, help="stop the replay at this many seconds")
    parser.add_argument("--no-check", action="store_true", help="skip the engine's invariant checks (faster)")
    parser.add_argument("--parallel", type=int, default=1, help="replay compared policies in N processes")
    parser.add_argument(
        "--progress",
        action="store_true",
        default=None,
        help="show a progress bar on stderr (default: when stderr is a terminal)",
    )
    parser.add_argument("--no-progress", dest="progress", action="store_false")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments, replay, print; return the exit status."""
    args = build_parser().parse_args(argv)
    names = [n.strip() for n in (args.compare or args.policy).split(",") if n.strip()]
    unknown = [n for n in names if n not in PRESETS]
    if unknown:
        print(f"error: unknown policy {', '.join(unknown)}; allowed: {', '.join(PRESETS)}", file=sys.stderr)
        return 2
    try:
        window = Window(parse_bound(args.start), parse_bound(args.end))
        trace = load_trace(args.trace, args.format, window)
        if not trace.jobs:
            print(f"error: no jobs in {args.trace} for the given window", file=sys.stderr)
            return 2
        cluster = load_cluster(args.cluster, trace.nodes)
        setup = resolve_quotas(args.quotas, trace, cluster)
        config = SimConfig(
            cycle_interval_s=args.interval,
            restart_cost_s=args.restart_cost,
            checkpoint_interval_s=args.checkpoint_interval,
            heartbeat_s=args.heartbeat,
            check_invariants=not args.no_check,
            exact_time_limits=args.exact_runtimes,
            until=args.until,
        )
    except (TraceError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    progress = sys.stderr.isatty() if args.progress is None else args.progress
    experiment = Experiment(trace, cluster, setup, config)
    summaries = experiment.run(names, parallel=args.parallel, progress=progress)
    if args.json:
        print(format_json(summaries, experiment.context()))
    else:
        span_days = trace.span_s / 86400
        title = (
            f"{trace.format} trace {args.trace}: {len(trace.jobs):,} jobs over {span_days:.1f} days, "
            f"{trace.gpu_seconds / 3600:,.0f} GPU-hours offered; cluster {cluster.description} "
            f"({cluster.capacity} GPUs); quotas {setup.source}"
        )
        print(format_table(summaries, title))
    clean = all(
        s["invariant_violations"] == 0 and s["quota_violations"] == 0 and s["apply_errors"] == 0
        for s in summaries
    )
    return 0 if clean else 1
