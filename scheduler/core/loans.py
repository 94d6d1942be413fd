"""Quota loans in the engine: the one place where a loan changes quota. A loan running at ``snapshot.now``
takes ``gpus`` from the lender's guarantee of the model (its all-pools row; never below zero, and its
never-lent part shrinks with it if need be) and adds them to the borrower's guarantee and limit (a borrower
with no row for the model gets one holding just the loan). A loan that has not started or has ended changes
nothing, so a loan ends by itself: from its end the lender's guarantee is back and reclaim returns the GPUs
to it. Every reader of quotas (the cycle, the invariants) sees the snapshot through ``with_loans``.
"""

from __future__ import annotations

import dataclasses

from scheduler.core.types import QuotaInfo, Snapshot


def with_loans(snapshot: Snapshot) -> Snapshot:
    """``snapshot`` with the loans running at its ``now`` applied to its quotas (and no loans left)."""
    if not snapshot.loans:
        return snapshot
    now = snapshot.now
    rows = {(q.team, q.gpu_model, q.pool): q for q in snapshot.quotas}
    for loan in sorted(snapshot.loans, key=lambda x: (x.starts_at, x.lender, x.borrower, x.gpu_model)):
        if not loan.starts_at <= now < loan.ends_at or loan.gpus <= 0:
            continue
        lender = rows.get((loan.lender, loan.gpu_model, None))
        if lender is None:
            continue  # nothing to lend: the loan moves nothing
        amount = min(loan.gpus, max(lender.guaranteed, 0.0))
        guaranteed = lender.guaranteed - amount
        rows[(loan.lender, loan.gpu_model, None)] = dataclasses.replace(
            lender, guaranteed=guaranteed, non_lendable=min(lender.non_lendable, guaranteed))
        key = (loan.borrower, loan.gpu_model, None)
        borrower = rows.get(key) or QuotaInfo(team=loan.borrower, gpu_model=loan.gpu_model, limit=0.0)
        rows[key] = dataclasses.replace(
            borrower, guaranteed=borrower.guaranteed + amount,
            limit=None if borrower.limit is None else borrower.limit + amount)
    return dataclasses.replace(snapshot, quotas=tuple(rows.values()), loans=())
