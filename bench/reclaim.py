"""Reclaim churn in the simulator: ``bench/load.py --guaranteed 1.0``'s shape, without the web stack.

Ten teams share 50 nodes x 8 GPUs and their guarantees add up to the whole pool; 2,000 jobs of 1, 1, 1, 2
or 4 GPUs are queued at the start (job i belongs to team i mod 10, as in load.py), each running 10-60 s in
load.py's class (training, preemptible, no minimum runtime, 1 s grace); cycles every 5 s (the live
default). Prints preemptions, finished jobs, preemptions per finished job and the most times one job was
preempted. Run: ``.venv/bin/python bench/reclaim.py [--spread S] [--skew]`` (bench/README.md has figures).
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduler.core.policies import PRESETS  # noqa: E402
from scheduler.core.types import PriorityClassInfo, QuotaInfo, TeamInfo  # noqa: E402
from scheduler.sim.cluster import load_cluster  # noqa: E402
from scheduler.sim.quotas import TeamSetup  # noqa: E402
from scheduler.sim.simulator import SimConfig, simulate  # noqa: E402
from scheduler.sim.trace import Trace, TraceJob  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--teams", type=int, default=10)
    parser.add_argument("--guaranteed", type=float, default=1.0, help="share of the pool guaranteed, all teams")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--spread", type=float, default=0.0,
                        help="seconds over which jobs arrive (0: all queued at the start, as load.py does)")
    parser.add_argument("--skew", action="store_true", help="team i submits (i + 1) times as often as team 0")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    cluster = load_cluster(f"{args.nodes}x8:h100")
    model = next(iter(cluster.capacity_by_model()))
    names = [f"team{i}" for i in range(args.teams)]
    weights = [i + 1 for i in range(args.teams)] if args.skew else None
    jobs = []
    for i in range(args.jobs):
        team = rng.choices(names, weights)[0] if weights else names[i % args.teams]
        jobs.append(TraceJob(id=i + 1, submit_time=round(args.spread * i / args.jobs, 1),
                             duration=float(rng.randint(10, 60)), gpus=rng.choice((1, 1, 1, 2, 4)), team=team,
                             priority_class="training"))
    trace = Trace(jobs=tuple(jobs))
    each = int(args.nodes * 8 * args.guaranteed) // args.teams
    setup = TeamSetup(teams=tuple(TeamInfo(name=n) for n in names),
                      quotas=tuple(QuotaInfo(team=n, gpu_model=model, guaranteed=each) for n in names))
    classes = (PriorityClassInfo("training", 500, min_runtime_s=0, grace_period_s=1),)
    result = simulate(trace, cluster, setup, PRESETS["rota"], SimConfig(cycle_interval_s=5.0, restart_cost_s=0.0),
                      priority_classes=classes)
    finished = sum(1 for j in result.jobs if j.end is not None)
    most = max((j.preemptions for j in result.jobs), default=0)
    print(f"preemptions {result.preemptions}, finished {finished}, per finished job "
          f"{result.preemptions / max(finished, 1):.3f}, most on one job {most}, "
          f"invariant violations {result.invariant_violations}, makespan {result.end_s:.0f} s")


if __name__ == "__main__":
    main()
