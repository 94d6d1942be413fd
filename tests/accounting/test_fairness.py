"""The fairness statement is pure: entitlements, waiting below the guarantee, entitled vs received (no database)."""

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accounting.fairness import QuotaTerm, entitlements, fairness_statement, wait_below_guarantee

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def h(n: float) -> datetime:
    return T0 + timedelta(hours=n)


def by_team(ents):
    return {(e.team, e.gpu_model): round(e.gpus, 9) for e in ents}


def test_the_guarantee_plus_an_equal_share_of_what_nobody_is_guaranteed():
    ents = entitlements({"h100": 4}, [QuotaTerm("vision", "h100", 2, 1), QuotaTerm("nlp", "h100", 1, 1)])
    assert by_team(ents) == {("nlp", "h100"): 1.5, ("vision", "h100"): 2.5}


def test_weights_split_the_unguaranteed_capacity():
    ents = entitlements({"h100": 8}, [QuotaTerm("a", "h100", 2, 3), QuotaTerm("b", "h100", 2, 1)])
    assert by_team(ents) == {("a", "h100"): 5.0, ("b", "h100"): 3.0}  # 2 + 4×3/4, 2 + 4×1/4


def test_oversubscribed_guarantees_are_scaled_to_the_capacity():
    ents = entitlements({"h100": 3}, [QuotaTerm("a", "h100", 4, 1), QuotaTerm("b", "h100", 2, 1)])
    assert by_team(ents) == {("a", "h100"): 2.0, ("b", "h100"): 1.0}


def test_quota_rows_per_pool_add_their_guarantees_and_keep_the_largest_weight():
    ents = entitlements(
        {"h100": 10},
        [QuotaTerm("a", "h100", 1, 1), QuotaTerm("a", "h100", 1, 2), QuotaTerm("b", "h100", 2, 2)],
    )
    assert by_team(ents) == {("a", "h100"): 5.0, ("b", "h100"): 5.0}


def test_a_model_with_no_gpus_entitles_nobody():
    assert by_team(entitlements({}, [QuotaTerm("a", "h100", 2, 1)])) == {("a", "h100"): 0.0}


@given(
    cap=st.integers(min_value=0, max_value=64),
    terms=st.lists(st.tuples(st.sampled_from("abcd"), st.integers(0, 16), st.integers(1, 5)), min_size=1, max_size=6),
)
def test_entitlements_on_a_model_add_up_to_its_capacity(cap, terms):
    ents = entitlements({"m": cap}, [QuotaTerm(t, "m", g, w) for t, g, w in terms])
    assert sum(e.gpus for e in ents) == pytest.approx(cap)
    assert all(e.gpus >= 0 for e in ents)


def test_it_counts_waiting_below_the_guarantee_and_the_shortfall():
    """Guarantee 2 over ten hours; jobs wait 1h–5h and 3h–6h (5 h together); the team holds 1 GPU until 4h,
    then 2: below its guarantee while waiting from 1h to 4h, one GPU short."""
    wait = wait_below_guarantee(
        start=h(0),
        end=h(10),
        guarantee=2,
        waiting=[(h(1), h(5)), (h(3), h(6))],
        held=[(h(0), h(10), 1.0), (h(4), h(12), 1.0)],
    )
    assert wait.waiting_s == 5 * 3600
    assert wait.below_s == 3 * 3600
    assert wait.shortfall_gpu_s == 3 * 3600


def test_fractions_count_by_their_share_and_intervals_are_clipped_to_the_period():
    wait = wait_below_guarantee(start=h(0), end=h(4), guarantee=1, waiting=[(h(-5), h(2))], held=[(h(-1), h(8), 0.25)])
    assert (wait.waiting_s, wait.below_s, wait.shortfall_gpu_s) == (7200, 7200, 0.75 * 7200)


def test_a_team_without_a_guarantee_never_waits_below_it():
    wait = wait_below_guarantee(start=h(0), end=h(4), guarantee=0, waiting=[(h(0), h(4))], held=[])
    assert wait.waiting_s == 4 * 3600 and wait.below_s == 0


def test_the_statement_compares_entitled_and_received_gpu_hours():
    rows = fairness_statement(
        start=h(0),
        end=h(10),
        teams=["vision", "nlp"],
        capacity=[(h(0), h(10), {"h100": 4, "a100": 2})],
        quotas=[QuotaTerm("vision", "h100", 2, 1), QuotaTerm("nlp", "h100", 1, 1), QuotaTerm("vision", "a100", 1, 1)],
        received_gpu_s={("vision", "h100"): 20 * 3600, ("nlp", "a100"): 3600},
        waiting={"nlp": [(h(0), h(2))]},
        held={},
    )
    nlp, vision = rows
    assert vision.team == "vision" and vision.hours == 10 and vision.guaranteed == 3
    assert [(ln.gpu_model, ln.entitled_gpu_hours, ln.received_gpu_hours) for ln in vision.lines] == [
        ("a100", 20.0, 0.0),  # 1 guaranteed + the whole spare GPU (no other team has an a100 quota)
        ("h100", 25.0, 20.0),  # (2 + 0.5) × 10 h
    ]
    assert vision.received_ratio == pytest.approx(20 / 45)
    assert [(ln.gpu_model, ln.entitled_gpus, ln.received_gpu_hours) for ln in nlp.lines] == [
        ("a100", 0.0, 1.0),  # used without a quota: received, not entitled
        ("h100", 1.5, 0.0),
    ]
    assert nlp.lines[0].received_ratio is None
    assert (nlp.waiting_hours, nlp.below_hours, nlp.shortfall_gpu_hours) == (2.0, 2.0, 2.0)


def test_an_empty_period_entitles_nothing():
    [row] = fairness_statement(
        start=h(0),
        end=h(0),
        teams=["a"],
        capacity=[(h(0), h(0), {"m": 2})],
        quotas=[QuotaTerm("a", "m", 1, 1)],
        received_gpu_s={},
        waiting={},
        held={},
    )
    assert row.entitled_gpu_hours == 0 and row.received_ratio is None
