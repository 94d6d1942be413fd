"""What a session remembers while it runs, so that work done for one job is not redone for the next.

Every table here is scoped to one session (one cycle) and dropped with it; none changes a decision (tests
turn the wait reuse off and compare). Each entry says what it is keyed on and what makes it stale: results
computed on a group carry the group's ``version`` (bumped whenever a node of the group changes), quota
admissions the model's quota ``version`` (bumped on every charge of it).
"""

from __future__ import annotations

from typing import Any

from scheduler.core.feasibility import Feasibility
from scheduler.core.placement import Request
from scheduler.core.types import Placement, Reason


class Memo:
    """The session's look-up tables (see the module docstring)."""

    __slots__ = ("claimable", "feasible", "full", "looks", "models_of", "no_claim", "no_plan", "placed",
                 "pools_of", "priority_reasons", "quota_blocked", "quota_ok", "request_values", "requests",
                 "slices", "stopping_max", "vetoes_at", "vetoes_of", "vetoes_res", "waits", "young")

    def __init__(self) -> None:
        # Per job shape: the placement request (one object per distinct request, so tables key on its id)
        self.requests: dict[tuple, Request] = {}
        self.request_values: dict[Request, Request] = {}
        self.looks: dict[tuple, Any] = {}  # look-alike key -> session.Look
        self.pools_of: dict[str, tuple[str, ...]] = {}  # team -> pools it may use
        self.models_of: dict[str, tuple[str, ...]] = {}  # team -> models "any model" means for it
        self.slices: frozenset[str] | None = None  # models whose devices are MIG slices
        self.feasible: dict[tuple, Feasibility] = {}  # (pools, models, id(req)) -> groups that could hold it
        # Quota: a refusal is kept (usage only grows); an admission holds until the model's next charge
        self.quota_blocked: dict[tuple, Reason] = {}
        self.quota_ok: dict[tuple, int] = {}
        # Placement: (id(group), id(req), spread, vetoed) -> (group.version, placements or None)
        self.placed: dict[tuple, tuple[int, tuple[Placement, ...] | None]] = {}
        self.full: set[tuple] = set()  # (id(group), id(req)) found full: resources only shrink in a cycle
        self.waits: dict[tuple, tuple[int, Reason]] = {}  # (id(group), id(req)) -> (version, wait reason)
        self.priority_reasons: dict[tuple | int, Reason] = {}  # per group or reservation, while it holds
        # (look.vetoes_key, time limit) -> reservation vetoes, while quota.charges and the number of
        # reservations are vetoes_at and vetoes_res
        self.vetoes_of: dict[tuple, tuple] = {}
        self.vetoes_at = -1
        self.vetoes_res = -1
        # Preemption: plans that failed, claims that failed (until a claim or a change in the group), the
        # stopping devices per group, and the young (not yet reclaimable) jobs per (model, pool)
        self.no_plan: set[tuple] = set()
        self.no_claim: dict[tuple, tuple[int, int]] = {}
        self.claimable: dict[tuple, list] = {}
        self.stopping_max: dict[int, int] = {}
        self.young: dict[tuple[str, str], list] = {}
