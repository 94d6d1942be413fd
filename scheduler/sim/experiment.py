"""One trace, one cluster, one set of quotas, replayed under one or more policies."""

from __future__ import annotations

import multiprocessing
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from scheduler.core.policies import policy_by_name
from scheduler.sim.cluster import Cluster
from scheduler.sim.metrics import summarize
from scheduler.sim.quotas import TeamSetup
from scheduler.sim.simulator import ScheduleFn, SimConfig, Simulator
from scheduler.sim.trace import Trace

_SHARED: Experiment | None = None  # the experiment forked worker processes read (no pickling needed)


@dataclass(frozen=True)
class Experiment:
    """Everything a replay needs except the policy."""

    trace: Trace
    cluster: Cluster
    setup: TeamSetup
    config: SimConfig = SimConfig()

    @property
    def packing(self) -> bool:
        """True for GPU-sharing traces, where unallocated GPUs are reported."""
        return self.trace.format == "openb" or any(job.gpu_fraction is not None for job in self.trace.jobs)

    def run_one(self, name: str, *, progress: bool = False, schedule_fn: ScheduleFn | None = None) -> dict:
        """Replay under the preset ``name`` and return its summary (see ``metrics.summarize``)."""
        policy = policy_by_name(name)
        bar = ProgressBar(name) if progress else None
        simulator = Simulator(
            self.trace,
            self.cluster,
            self.setup,
            policy,
            self.config,
            schedule_fn=schedule_fn,
            progress=bar.update if bar else None,
        )
        result = simulator.run()
        if bar:
            bar.done(result.wall_s)
        return summarize(result, packing=self.packing)

    def run(self, names: Sequence[str], *, parallel: int = 1, progress: bool = False) -> list[dict]:
        """Replay under each preset in ``names`` (validated first); ``parallel`` > 1 uses forked processes."""
        for name in names:
            policy_by_name(name)
        if parallel <= 1 or len(names) <= 1 or "fork" not in multiprocessing.get_all_start_methods():
            return [self.run_one(name, progress=progress) for name in names]
        global _SHARED
        _SHARED = self
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=min(parallel, len(names)), mp_context=context) as pool:
            futures = [pool.submit(_run_shared, name) for name in names]
            summaries = []
            for name, future in zip(names, futures, strict=True):
                summaries.append(future.result())
                if progress:
                    print(f"{name}: done in {summaries[-1]['wall_s']:.1f} s", file=sys.stderr)
        _SHARED = None
        return summaries

    def context(self) -> dict[str, object]:
        """What was replayed, for the JSON output."""
        trace = self.trace
        return {
            "trace": {
                "source": trace.source,
                "format": trace.format,
                "jobs": len(trace.jobs),
                "origin": trace.origin.isoformat() if trace.origin else None,
                "span_s": trace.span_s,
                "offered_gpu_hours": trace.gpu_seconds / 3600.0,
                "skipped": trace.skipped,
            },
            "cluster": {
                "spec": self.cluster.description,
                "nodes": len(self.cluster.nodes),
                "gpus": self.cluster.capacity,
                "by_model": self.cluster.capacity_by_model(),
                "pools": list(self.cluster.pools),
            },
            "quotas": self.setup.source,
            "config": {
                "cycle_interval_s": self.config.cycle_interval_s,
                "restart_cost_s": self.config.restart_cost_s,
                "checkpoint_interval_s": self.config.checkpoint_interval_s,
                "heartbeat_s": self.config.heartbeat_s,
                "exact_time_limits": self.config.exact_time_limits,
                "check_invariants": self.config.check_invariants,
                "until": self.config.until,
            },
        }


def _run_shared(name: str) -> dict:
    """Worker entry point: replay the forked experiment under ``name``."""
    assert _SHARED is not None
    return _SHARED.run_one(name)


class ProgressBar:
    """A one-line progress bar on stderr: ``rota [#####.....]  48%  12 s``."""

    def __init__(self, label: str, width: int = 30) -> None:
        self.label, self.width = label, width
        self.began = time.perf_counter()
        self.shown = -1

    def update(self, fraction: float) -> None:
        """Redraw when the percentage changed."""
        percent = int(fraction * 100)
        if percent == self.shown:
            return
        self.shown = percent
        filled = int(fraction * self.width)
        elapsed = time.perf_counter() - self.began
        sys.stderr.write(
            f"\r{self.label:>10} [{'#' * filled}{'.' * (self.width - filled)}] {percent:3d}% {elapsed:5.0f} s"
        )
        sys.stderr.flush()

    def done(self, wall_s: float) -> None:
        """Finish the line."""
        self.update(1.0)
        sys.stderr.write(f"\r{self.label:>10} [{'#' * self.width}] done in {wall_s:.1f} s\n")
        sys.stderr.flush()
