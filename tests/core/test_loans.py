"""Quota loans: while a loan runs the guarantee is the borrower's, before and after it the lender's."""

import dataclasses

from scheduler.core import check_invariants, schedule
from scheduler.core.loans import with_loans
from scheduler.core.types import JobInfo, LoanInfo
from tests.core.builders import by_id, gpu_ids, node, quota, running, snap

N1 = node("n1", gpus=8, first_id=100)
LOAN = LoanInfo(lender="vision", borrower="nlp", gpu_model="h100-80gb", gpus=4, starts_at=500.0, ends_at=2000.0)
QUOTAS = [quota("vision", guaranteed=8, limit=8), quota("nlp", guaranteed=0, limit=0)]


def with_loan(s):
    return dataclasses.replace(s, loans=(LOAN,))


def test_a_running_loan_lets_the_borrower_run_non_preemptible_work_in_its_new_guarantee():
    jobs = [JobInfo(1, "nlp", gpus=4, preemptible=False)]
    without = schedule(snap([N1], jobs, QUOTAS))
    assert by_id(without)[1][1].reason.code == "QuotaExceeded"
    s = snap([N1], jobs, QUOTAS, now=1000.0)
    s = with_loan(s)
    d = schedule(s)
    assert by_id(d)[0] == {1} and d.starts[0].borrowed == 0
    assert check_invariants(s, d) == []


def test_the_lender_cannot_take_back_lent_gpus_while_the_loan_runs():
    jobs = [running(1, "nlp", gpu_ids(N1, 4), started_at=600.0), JobInfo(2, "vision", gpus=8)]
    d = schedule(with_loan(snap([N1], jobs, QUOTAS, now=1000.0)))
    assert d.preemptions == () and 2 in by_id(d)[1]


def test_at_the_end_of_the_loan_reclaim_returns_the_gpus_to_the_lender():
    jobs = [running(1, "nlp", gpu_ids(N1, 4), started_at=600.0), JobInfo(2, "vision", gpus=8)]
    s = with_loan(snap([N1], jobs, [quota("vision", guaranteed=8, limit=8), quota("nlp", guaranteed=0, limit=4)],
                       now=2000.0))
    d = schedule(s)
    assert [(p.job_id, p.reason) for p in d.preemptions] == [(1, "Reclaim")]
    assert check_invariants(s, d) == []


def test_a_loan_moves_guarantee_and_limit_and_never_lends_more_than_the_lender_has():
    big = LoanInfo("vision", "nlp", "h100-80gb", gpus=20, starts_at=0.0, ends_at=10.0)
    s = dataclasses.replace(snap([N1], [], QUOTAS, now=5.0), loans=(big,))
    rows = {q.team: q for q in with_loans(s).quotas}
    assert (rows["vision"].guaranteed, rows["nlp"].guaranteed) == (0.0, 8.0)
    assert (rows["vision"].limit, rows["nlp"].limit) == (8.0, 8.0)


def test_a_borrower_without_quota_for_the_model_gets_just_the_loan():
    s = with_loans(with_loan(snap([N1], [], [quota("vision", guaranteed=8, limit=8)], now=1000.0)))
    nlp = next(q for q in s.quotas if q.team == "nlp")
    assert (nlp.guaranteed, nlp.limit) == (4.0, 4.0)
