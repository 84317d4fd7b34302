"""The credits a refund takes back (app.purchases.refunds.credits_to_take): the share of the
cumulative refunded amount, rounded down, less what was taken before; integers only."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.purchases.refunds import credits_to_take

# up to a trillion credits bought for up to a million in major units: far past a float's
# 53 bits when multiplied, where float arithmetic would round wrong
CREDITS = st.integers(min_value=0, max_value=10**12)
AMOUNT = st.integers(min_value=1, max_value=10**8)


def test_worked_examples() -> None:
    assert credits_to_take(1000, 1000, 250, 0) == 250
    assert credits_to_take(1000, 1000, 500, 250) == 250  # a second partial refund
    assert credits_to_take(1000, 1000, 500, 500) == 0  # the same event again
    assert credits_to_take(1000, 1000, 250, 500) == 0  # an older event, late
    assert credits_to_take(1000, 1000, 1000, 500) == 500  # the rest, refunded in full
    assert credits_to_take(100, 3, 1, 0) == 33  # rounded down, in the buyer's favour
    assert credits_to_take(100, 3, 2, 33) == 33
    assert credits_to_take(100, 3, 3, 66) == 34  # a full refund takes every credit
    assert credits_to_take(1000, 1000, 5000, 0) == 1000  # more than paid: clamped
    assert credits_to_take(0, 1000, 1000, 0) == 0


def test_integers_only_where_a_float_would_round_wrong() -> None:
    credits = 10**17 + 1
    assert credits_to_take(credits, 3, 3, 0) == credits
    assert credits_to_take(credits, 3, 1, 0) == (10**17 + 1) // 3
    assert int(credits * (1 / 3)) != (10**17 + 1) // 3  # what a float would have said


@pytest.mark.parametrize(
    "args", [(-1, 1, 0, 0), (1, 0, 0, 0), (1, -5, 0, 0), (1, 1, -1, 0), (1, 1, 0, -1)]
)
def test_impossible_arguments_are_a_programming_error(args: tuple[int, int, int, int]) -> None:
    with pytest.raises(ValueError, match="credits_to_take"):
        credits_to_take(*args)


@given(CREDITS, AMOUNT, st.data())
def test_monotone_in_the_amount_refunded_and_never_above_the_credits(
    credits: int, amount: int, data: st.DataObject
) -> None:
    low = data.draw(st.integers(min_value=0, max_value=2 * amount))
    high = data.draw(st.integers(min_value=low, max_value=2 * amount))
    taken = data.draw(st.integers(min_value=0, max_value=credits))
    assert credits_to_take(credits, amount, low, taken) >= 0
    assert credits_to_take(credits, amount, low, taken) <= credits_to_take(
        credits, amount, high, taken
    )
    assert credits_to_take(credits, amount, high, 0) <= credits
    assert credits_to_take(credits, amount, amount, 0) == credits


@given(CREDITS, AMOUNT, st.data())
def test_successive_refunds_add_up_to_the_final_share(
    credits: int, amount: int, data: st.DataObject
) -> None:
    cumulative = sorted(data.draw(st.lists(st.integers(0, amount), min_size=1, max_size=12)))
    taken = 0
    for refunded in cumulative:
        taken += credits_to_take(credits, amount, refunded, taken)
    assert taken == credits * cumulative[-1] // amount


@given(CREDITS, AMOUNT, st.data())
def test_any_order_and_repetition_ends_at_the_largest_share(
    credits: int, amount: int, data: st.DataObject
) -> None:
    # Stripe may deliver refunds late, twice, or out of order: the total taken is the share
    # of the largest cumulative amount seen, whatever came in between
    deliveries = data.draw(st.lists(st.integers(0, amount), min_size=1, max_size=12))
    taken = 0
    for refunded in deliveries:
        step = credits_to_take(credits, amount, refunded, taken)
        assert step >= 0
        taken += step
        assert taken <= credits
    assert taken == credits * max(deliveries) // amount
