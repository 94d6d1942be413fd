"""Devices of stopping jobs (earlier victims, cancelled work): claimed by a waiting job that they make fit.

A stopping job keeps its devices until its node confirms its processes are gone; a job that would fit once
they are free claims them (and the idle devices beside them it needs) instead of preempting anew. Each
part of the job (see ``placement.part_sizes``) takes a node whose idle devices plus those being released
are enough, nodes with releases first (in name order), then already free nodes; at least one part must
use released devices (else it fits now, or not at all).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from scheduler.core import reasons as R
from scheduler.core.cluster import EPS, Group, Node
from scheduler.core.feasibility import shape_text
from scheduler.core.placement import Request, best_node, fits_host, part_sizes
from scheduler.core.session import Session
from scheduler.core.types import JobInfo, Placement

_reason = R.reasoner("preempt")  # reasons of the preempt action

_NO_SHARES: Mapping[int, float] = MappingProxyType({})  # a node without stopping jobs


def claim(s: Session, job: JobInfo, req: Request, group: Group) -> bool:
    """If devices of stopping jobs make ``job`` fit in ``group``, hold them for it; True when it did.

    A failure is remembered until a claim or a change in the group (nothing else it reads moves): with many
    jobs stopping (a preemption wave), every waiting job would scan every stopping node again."""
    key = (id(group), id(req))
    stamp = (s.statement.claims, group.version)
    if s.memo.no_claim.get(key) == stamp:
        return False
    if not _claim(s, job, req, group):
        s.memo.no_claim[key] = stamp
        return False
    return True


def _claim(s: Session, job: JobInfo, req: Request, group: Group) -> bool:
    parts = part_sizes(req, group)
    if not parts:
        return False
    want = req.fraction if req.fraction is not None else 1.0
    devices = s.cluster.devices
    chosen: list[tuple[str, list[int]]] = []
    used: set[str] = set()
    n_parts = len(parts)
    unfilled = []
    count = group.count if want == 1.0 else None  # whole free devices per node order
    if count is not None and min(parts) > _most(s, group):  # no part fits one
        return False
    for need in parts:
        # The nodes that may still give a part of this size (see _claimable); those found out for good on
        # the way leave the list.
        candidates = _claimable(s, group, need if count is not None else 0)
        gone: set[str] = set()
        found = False
        for name, node, ids in candidates:
            if name in used:
                continue
            releasing = s.stopping.get(name, _NO_SHARES)
            live = sum(1 for i in ids if i in releasing) if releasing else 0
            # At most its free devices and its released ones of the model qualify; both only ever shrink.
            if not live or (count is not None and count.get(node.order, 0) + live < need):
                gone.add(name)
                continue
            if not fits_host(node, req, n_parts):
                continue
            ok = [d.id for d in node.by_model.get(group.model, ())
                  if d.healthy and d.memory_mb >= req.min_memory_mb
                  and d.free + releasing.get(d.id, 0.0) >= want - EPS][:need]
            if len(ok) == need and any(i in releasing for i in ok):
                chosen.append((name, ok))
                used.add(name)
                found = True
                break
        if gone:
            candidates[:] = [c for c in candidates if c[0] not in gone]
        if not found:
            unfilled.append(need)
    if not chosen:
        return False
    for need in unfilled:
        taken = [s.cluster.nodes[name].order for name in used]
        best = best_node(s.cluster, group, req, need, n_parts, False, None, exclude=taken)
        if best is None:
            return False
        node = best[0]
        chosen.append((node.name, [d.id for d in best[1]]))
        used.add(node.name)
    st = s.statement
    st.count_claim()
    idle: list[Placement] = []
    for name, ok in chosen:
        releasing = s.stopping.get(name, {})
        idle.extend(Placement(i, want) for i in ok if i not in releasing and devices[i].free >= want - EPS)
        st.claim(name, ok)
    st.hold(job, group, req, tuple(idle), s.now)
    names = ", ".join(name for name, _ok in chosen)
    st.wait(job, _reason(
        R.PREEMPTING, f"waits for stopping jobs to release {shape_text(req)} of {group.model} on {names}",
        node=chosen[0][0], nodes=[name for name, _ok in chosen], gpu_model=group.model), group, req)
    return True


def _claimable(s: Session, group: Group, need: int) -> list[tuple[str, Node, tuple[int, ...]]]:
    """The group's schedulable nodes with devices of its model being released, in name order, each with
    those devices, that may still give a part of ``need`` whole devices (0: a fraction of one). Built once
    per session, group and size, from the snapshot's stopping jobs; ``_claim`` drops the nodes it finds out
    for good (free devices only get taken and released ones claimed during a cycle)."""
    table = s.memo.claimable
    key = (id(group), need)
    out = table.get(key)
    if out is None:
        base = table.get((id(group), None))
        if base is None:
            nodes, devices, model = s.cluster.nodes, s.cluster.devices, group.model
            base = table[(id(group), None)] = []
            for name in sorted(s.stopping):
                node = nodes[name]
                ids = tuple(i for i in s.stopping[name] if devices[i].model == model)
                if ids and node.pool == group.pool and node.schedulable:
                    base.append((name, node, ids))
        out = table[key] = list(base)
    return out


def _most(s: Session, group: Group) -> int:
    """The most whole devices a claim could find on one node of the group at the start of the cycle (so at
    most that for the rest of it)."""
    most = s.memo.stopping_max.get(id(group))
    if most is None:
        count = group.count
        most = s.memo.stopping_max[id(group)] = max(
            (count.get(node.order, 0) + len(ids) for _name, node, ids in _claimable(s, group, 0)), default=0)
    return most
