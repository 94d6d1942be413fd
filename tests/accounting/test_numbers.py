"""Numbers for people are pure: a small amount never reads as zero, money rounds to cents as the ledger does."""

from decimal import Decimal

import pytest

from accounting.numbers import money, percent, quantity


@pytest.mark.parametrize(
    ("value", "places", "text"),
    [
        (0, 1, "0"),
        (0.0233333, 1, "0.023"),  # two significant digits below 1, not "0.0"
        (0.0025, 2, "0.0025"),
        (0.5, 1, "0.50"),
        (0.999, 1, "1.0"),  # rounds up into the next rule
        (14357.25, 1, "14357.3"),
        (Decimal("21.005"), 2, "21.01"),
        (0.0004, 1, "<0.001"),
        (None, 1, "n/a"),
    ],
)
def test_a_quantity_keeps_enough_digits_to_be_non_zero(value, places, text):
    assert quantity(value, places) == text


def test_quantities_and_money_can_group_thousands_for_statements():
    assert quantity(14357.25, 2, grouping=True) == "14,357.25"
    assert money(Decimal("1234.567"), grouping=True) == "1,234.57"


@pytest.mark.parametrize(
    ("value", "text"),
    [(Decimal("0.004"), "<0.01"), (Decimal("0.005"), "0.01"), (Decimal(0), "0.00"), (Decimal("82.5"), "82.50")],
)
def test_money_is_cents_half_up_and_a_fraction_of_a_cent_is_not_zero(value, text):
    assert money(value) == text


@pytest.mark.parametrize(("ratio", "text"), [(0, "0%"), (0.004, "<1%"), (0.005, "1%"), (2.5, "250%"), (None, "n/a")])
def test_a_ratio_reads_as_whole_percent(ratio, text):
    assert percent(ratio) == text
