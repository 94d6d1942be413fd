"""Capacity over time is pure: each GPU counts only while it was in the inventory, and idle cost and entitlements
follow (no database)."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accounting.capacity import InventoryGpu, OpenPresence, Presence, capacity_steps, integrate, reconcile
from accounting.fairness import QuotaTerm, fairness_statement
from accounting.idle import idle_lines
from accounting.periods import spans
from accounting.rating import RateCardVersion

DAY = datetime(2026, 11, 3, tzinfo=UTC)
V1 = RateCardVersion(1, datetime(2026, 1, 1, tzinfo=UTC), {"h100": Decimal("4.00"), "a100": Decimal("2.00")})
H100, A100 = 1, 2  # GPU model ids


def h(n: float) -> datetime:
    return DAY + timedelta(hours=n)


def test_a_gpu_counts_only_while_it_was_in_the_inventory():
    steps = capacity_steps(
        [Presence("h100", h(-5), None), Presence("h100", h(6), h(18)), Presence("a100", h(12), None)], h(0), h(24)
    )
    assert steps == [
        (h(0), h(6), {"h100": 1}),
        (h(6), h(12), {"h100": 2}),
        (h(12), h(18), {"a100": 1, "h100": 2}),
        (h(18), h(24), {"a100": 1, "h100": 1}),
    ]


def test_before_any_gpu_existed_the_range_has_no_capacity_and_open_stretches_stop_at_its_end():
    steps = capacity_steps([Presence("h100", h(20), None)], h(0), h(22))
    assert steps == [(h(0), h(20), {}), (h(20), h(22), {"h100": 1})]
    assert integrate(steps, h(0), h(22)) == {"h100": (Decimal(7200), 1)}
    assert capacity_steps([Presence("h100", h(20), None)], h(5), h(5)) == []


def test_integrate_gives_gpu_seconds_and_the_most_gpus_at_once_for_any_span():
    steps = capacity_steps([Presence("h100", h(0), None), Presence("h100", h(1), h(2))], h(0), h(4))
    assert integrate(steps, h(0.5), h(3)) == {"h100": (Decimal(12600), 2)}  # 0.5 + 2 + 1 GPU-hours
    assert integrate(steps, h(3), h(4)) == {"h100": (Decimal(3600), 1)}
    assert integrate(steps, h(5), h(6)) == {}


def test_a_gpu_that_arrived_at_noon_is_idle_only_from_noon():
    lines = idle_lines(
        periods=spans(DAY, h(24), "day"),
        capacity=capacity_steps([Presence("h100", h(12), None)], DAY, h(24)),
        allocated={(DAY, "h100", 1): Decimal(2 * 3600)},
        cards=[V1],
    )
    [line] = lines
    assert (line.capacity_gpus, line.capacity_gpu_seconds, line.idle_gpu_hours) == (1, 12 * 3600, 10)
    assert line.cost == Decimal("40.00")


def test_capacity_is_never_less_than_what_was_allocated():
    """The history may trail a registration by one rollup: the allocation proves the GPU was there."""
    [line] = idle_lines(
        periods=spans(DAY, h(24), "day"),
        capacity=capacity_steps([Presence("h100", h(23), None)], DAY, h(24)),
        allocated={(DAY, "h100", 1): Decimal(3 * 3600)},
        cards=[V1],
    )
    assert (line.capacity_gpu_seconds, line.allocated_gpu_seconds, line.idle_gpu_seconds) == (3 * 3600, 3 * 3600, 0)


def test_a_model_with_neither_gpus_nor_allocations_has_no_idle_line():
    lines = idle_lines(
        periods=spans(DAY, h(48), "day"),
        capacity=capacity_steps([Presence("a100", h(30), None)], DAY, h(48)),
        allocated={},
        cards=[V1],
    )
    assert [(ln.period, ln.gpu_model, ln.idle_gpu_hours) for ln in lines] == [(h(24), "a100", 18)]


@given(
    stretches=st.lists(
        st.tuples(st.sampled_from(["h100", "a100"]), st.integers(0, 96), st.integers(1, 96), st.booleans()),
        max_size=8,
    ),
    used=st.dictionaries(
        st.tuples(st.integers(0, 3), st.sampled_from(["h100", "a100"])), st.integers(0, 40 * 3600), max_size=8
    ),
)
def test_capacity_is_allocated_plus_idle_in_every_line(stretches, used):
    presences = [Presence(m, h(a), h(a + n) if closed else None) for m, a, n, closed in stretches]
    steps = capacity_steps(presences, DAY, h(96))
    allocated = {(h(24 * d), m, 1): Decimal(s) for (d, m), s in used.items()}
    lines = idle_lines(periods=spans(DAY, h(96), "day"), capacity=steps, allocated=allocated, cards=[V1])
    for ln in lines:
        assert ln.capacity_gpu_seconds == ln.allocated_gpu_seconds + ln.idle_gpu_seconds
        assert ln.idle_gpu_seconds >= 0
    recorded = sum((s for m in ("h100", "a100") for s, _ in [integrate(steps, DAY, h(96)).get(m, (0, 0))]), 0)
    assert sum(ln.capacity_gpu_seconds for ln in lines) >= recorded
    if not allocated:
        assert sum(ln.capacity_gpu_seconds for ln in lines) == recorded


def test_entitlements_count_only_the_hours_the_gpus_existed():
    """Four h100s arrive at 8h of a ten-hour period: vision (2 guaranteed) and nlp (1) split the spare one."""
    rows = fairness_statement(
        start=h(0),
        end=h(10),
        teams=["vision", "nlp"],
        capacity=capacity_steps([Presence("h100", h(8), None)] * 4, h(0), h(10)),
        quotas=[QuotaTerm("vision", "h100", 2, 1), QuotaTerm("nlp", "h100", 1, 1)],
        received_gpu_s={("vision", "h100"): 3600},
        waiting={"vision": [(h(0), h(10))]},
        held={},
    )
    nlp, vision = rows
    [line] = vision.lines
    assert (line.capacity, line.guaranteed, line.entitled_gpus, line.hours) == (4, 2, 2.5, 2)
    assert line.entitled_gpu_hours == 5  # 2.5 GPUs × 2 h, not × 10 h
    assert vision.received_ratio == pytest.approx(1 / 5)
    assert nlp.entitled_gpu_hours == 3
    # waiting all period, but owed a guarantee only once the GPUs existed
    assert (vision.waiting_hours, vision.below_hours, vision.shortfall_gpu_hours) == (10, 2, 4)


def test_a_period_before_any_gpu_entitles_nobody():
    [row] = fairness_statement(
        start=h(0),
        end=h(10),
        teams=["vision"],
        capacity=capacity_steps([], h(0), h(10)),
        quotas=[QuotaTerm("vision", "h100", 2, 1)],
        received_gpu_s={},
        waiting={"vision": [(h(0), h(10))]},
        held={},
    )
    assert row.entitled_gpu_hours == 0 and row.received_ratio is None and row.below_hours == 0
    assert [(ln.gpu_model, ln.entitled_gpus, ln.hours) for ln in row.lines] == [("h100", 0.0, 0.0)]


def gpu(id_, model=H100, present=True, registered_at=None):
    return InventoryGpu(id_, model, present, registered_at)


def test_reconcile_opens_a_new_gpu_at_the_registration_that_added_it():
    plan = reconcile([], [gpu(1, registered_at=h(2)), gpu(2, present=False, registered_at=h(2))], now=h(3))
    assert plan.close == {} and plan.open == {1: (H100, h(2))}


def test_reconcile_leaves_a_gpu_that_is_still_there_alone_whatever_its_node_did_since():
    plan = reconcile([OpenPresence(10, 1, H100, h(0))], [gpu(1, registered_at=h(5))], now=h(6))
    assert plan.close == {} and plan.open == {}


def test_reconcile_closes_a_gone_gpu_at_the_registration_that_found_it_missing():
    plan = reconcile([OpenPresence(10, 1, H100, h(0))], [gpu(1, present=False, registered_at=h(4))], now=h(6))
    assert plan.close == {10: h(4)} and plan.open == {}


def test_reconcile_closes_and_reopens_a_card_replaced_by_another_model():
    plan = reconcile([OpenPresence(10, 1, H100, h(0))], [gpu(1, model=A100, registered_at=h(4))], now=h(6))
    assert plan.close == {10: h(4)} and plan.open == {1: (A100, h(4))}


def test_reconcile_closes_a_deleted_gpu_now_and_never_before_its_stretch_began():
    plan = reconcile([OpenPresence(10, None, H100, h(0)), OpenPresence(11, 2, H100, h(5))], [gpu(2, present=False,
                     registered_at=h(1))], now=h(6))  # fmt: skip
    assert plan.close == {10: h(6), 11: h(5)}


def test_reconcile_backdates_a_gpu_never_recorded_to_its_first_allocation():
    """A GPU present before the history began: its node registered again at 5h, but it was allocated at 1h."""
    plan = reconcile([], [gpu(1, registered_at=h(5)), gpu(2)], now=h(6), first_seen={1: h(1)})
    assert plan.open == {1: (H100, h(1)), 2: (H100, h(6))}
