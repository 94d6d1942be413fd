"""Kinds plugin: what a job's workload kind changes in the core.

An inference service is placed spread out (the emptiest node first), so one node's loss takes few of its
replicas with it; every other kind packs by best fit unless the policy spreads everything. (Kinds' other
defaults, such as priority class, time limit and idle timeout, are applied when a job is submitted.)
"""

from __future__ import annotations

from scheduler.core.types import JobInfo, Policy

NAME = "kinds"
SPREAD_KINDS = frozenset({"inference"})


def spreads(policy: Policy, job: JobInfo) -> bool:
    """Whether ``job`` is placed spread out rather than by best fit."""
    return policy.placement == "spread" or job.kind in SPREAD_KINDS
