"""Trace simulator: replays GPU cluster traces through ``scheduler.core.schedule`` (never a copy of it)
and measures scheduling quality. Pure Python: imports ``scheduler.core``, the standard library and
PyYAML only. Entry point: ``python -m scheduler.sim`` (see ``scheduler.sim.cli``).
"""

from scheduler.sim.cluster import Cluster, load_cluster
from scheduler.sim.experiment import Experiment
from scheduler.sim.loaders import Window, load_trace
from scheduler.sim.metrics import summarize
from scheduler.sim.quotas import TeamSetup, resolve_quotas
from scheduler.sim.simulator import SimConfig, Simulator, simulate
from scheduler.sim.trace import Trace, TraceError, TraceJob

__all__ = [
    "Cluster",
    "Experiment",
    "SimConfig",
    "Simulator",
    "TeamSetup",
    "Trace",
    "TraceError",
    "TraceJob",
    "Window",
    "load_cluster",
    "load_trace",
    "resolve_quotas",
    "simulate",
    "summarize",
]
