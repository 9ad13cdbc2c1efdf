from datetime import datetime, timedelta, timezone

import pytest

from src.availability import AvailabilityView, StockRow
from src.cart import Cart
from src.clock import ManualClock
from src.errors import HoldExpired, InsufficientStock
from src.holds import HoldStore
from src.ledger import StockLedger
from src.reservations import ReservationService

START = datetime(2024, 3, 4, 10, 0, tzinfo=timezone.utc)


def make_shop(on_hand=10):
    clock = ManualClock(START)
    ledger = StockLedger()
    ledger.receive("MUG-BLUE", "BER", on_hand)
    service = ReservationService(ledger, HoldStore(), clock, hold_ttl=timedelta(minutes=15))
    return clock, ledger, service, AvailabilityView(ledger)


def test_emptying_a_cart_after_the_expiry_job_returns_stock_once():
    """Issue: "On another SKU with a single customer (10 on hand, one hold of 3 that expired and whose cart was emptied afterwards) the report showed reserved -3 and available 13, more than we own."

    src/reservations.py docstring: "Returns ``True`` if this call returned stock, ``False`` if there was nothing left to return."
    """
    clock, ledger, service, view = make_shop()
    cart = Cart("A", service)
    hold = cart.add("MUG-BLUE", 3)
    clock.advance(minutes=16)
    assert len(service.expire_due()) == 1
    assert view.total("MUG-BLUE") == 10
    with pytest.raises(HoldExpired):
        cart.checkout()
    cart.clear()
    assert view.report("MUG-BLUE") == [StockRow("BER", 10, 0, 10)]
    assert service.release(hold.hold_id) is False
    assert view.total("MUG-BLUE") == 10


def test_expired_cart_does_not_free_stock_held_by_another_cart():
    """Issue: "Only B was holding anything, so it should have said reserved 5, available 5." """
    clock, ledger, service, view = make_shop()
    cart_a = Cart("A", service)
    cart_a.add("MUG-BLUE", 3)
    clock.advance(minutes=4)
    cart_b = Cart("B", service)
    cart_b.add("MUG-BLUE", 5)
    clock.advance(minutes=12)
    service.expire_due()
    clock.advance(minutes=1)
    with pytest.raises(HoldExpired):
        cart_a.checkout()
    cart_a.clear()
    assert view.total("MUG-BLUE") == 5
    with pytest.raises(InsufficientStock):
        Cart("C", service).add("MUG-BLUE", 6)


def test_no_oversell_once_an_expired_cart_is_emptied():
    """Issue: "Expected: however a hold ends … its units come back to availability exactly once, and the shop never lets customers hold or buy more than is on hand." """
    clock, ledger, service, view = make_shop()
    cart_a = Cart("A", service)
    cart_a.add("MUG-BLUE", 3)
    clock.advance(minutes=4)
    cart_b = Cart("B", service)
    cart_b.add("MUG-BLUE", 5)
    clock.advance(minutes=12)
    service.expire_due()
    cart_a.clear()
    cart_c = Cart("C", service)
    with pytest.raises(InsufficientStock):
        cart_c.add("MUG-BLUE", 8)
    cart_c.add("MUG-BLUE", 5)
    cart_b.checkout()
    cart_c.checkout()
    assert view.report("MUG-BLUE") == [StockRow("BER", 0, 0, 0)]


def test_each_hold_returns_stock_exactly_once_whether_or_not_the_job_ran():
    """Issue: "Expected: however a hold ends (line removed, cart emptied, collected by the expiry job, or several of these in whatever order, before or after the job has run) its units come back to availability exactly once…" """
    clock, ledger, service, view = make_shop()
    swept = Cart("Y", service)
    swept.add("MUG-BLUE", 3)
    clock.advance(minutes=1)
    lapsed = Cart("X", service)
    lapsed.add("MUG-BLUE", 2)
    service.reserve("Z", "MUG-BLUE", 5, ttl=timedelta(hours=2))
    clock.advance(minutes=14, seconds=30)
    assert len(service.expire_due()) == 1
    clock.advance(minutes=1)
    lapsed.clear()
    swept.clear()
    assert view.total("MUG-BLUE") == 5
    service.expire_due()
    assert view.total("MUG-BLUE") == 5
    assert ledger.reserved("MUG-BLUE", "BER") == 5
