from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

import pytest

from src.orders import Batch, OrderDesk

TUESDAY = date(2024, 4, 2)
LOCAL = timezone(timedelta(hours=-5))
D = Decimal


def at(day, hour, minute=0, second=0, offset=-5, month=4):
    """An instant on 2024-<month>-<day> in the given UTC offset (hours)."""
    return datetime(2024, month, day, hour, minute, second, tzinfo=timezone(timedelta(hours=offset)))


def customer(cid, limit=10000.0, **extra):
    return {"id": cid, "credit_limit": limit, **extra}


def order(oid, subtotal, cid="C-1", **extra):
    return {"id": oid, "customer_id": cid, "subtotal": subtotal, **extra}


def batch(orders, business_date=TUESDAY, customers=None, coupons=(), signals=()):
    return Batch(
        business_date,
        customers=list(customers or [customer("C-1")]),
        orders=list(orders),
        coupons=list(coupons),
        signals=list(signals),
    )


def settle_batch(the_batch, script=None, policy=None, ledger=None):
    from src.orders.gateway import ScriptedGateway
    from src.orders.settlement import Ledger, SettlementPolicy, settle

    run = OrderDesk().process(the_batch)
    gateway = ScriptedGateway(script)
    ledger = ledger if ledger is not None else Ledger()
    report = settle(run, gateway, ledger, policy or SettlementPolicy())
    return run, gateway, ledger, report


def listed(report, *names):
    """The report's order lists, as tuples."""
    return tuple(tuple(getattr(report, name)) for name in names)


def parts(entry):
    return [(p.number, p.amount, p.status) for p in entry.parts]


def day_row(day):
    return (day.settlement_date, day.captures, day.gross, day.fees, day.net)


# -- which orders, for what amount -------------------------------------------


def test_order_referred_after_its_surcharge_is_not_settled():
    """README: "A run leaves every order in exactly one of `held`, `review` and `approved`, and an order is approved or referred for its final total, never for an amount from earlier in the run." Settlement docs: "Only orders whose status is `approved` are settled." """
    run, gateway, ledger, report = settle_batch(
        batch([order("ORD-7731", 1200.0, "C-88", country="DE")], customers=[customer("C-88", 1220.0)])
    )
    assert run.decision("ORD-7731").status == "review"
    assert gateway.calls == []
    assert ledger.entry("ORD-7731") is None
    assert listed(report, "captured", "pending", "days") == ((), (), ())


def test_discounted_foreign_order_settles_its_final_total_with_the_cross_border_fee():
    """README: "Orders shipped outside the home country pay a cross-border surcharge of `surcharge_rate` (4% by default) of the subtotal after discount, rounded to the cent; customers in an exempt tier (gold by default) pay none." Settlement docs: "The amount settled for an order is its final total." Settlement docs: "Each captured part pays a processing fee of `fee_rate` [2.9%] of the part's amount, plus `cross_border_fee_rate` [1%] of it when the order ships outside the batch's home country, plus `fee_fixed` [0.30]." """
    run, gateway, ledger, report = settle_batch(
        batch(
            [order("ORD-7751", 1000.0, country="DE", coupon_code="TEN")],
            coupons=[{"code": "TEN", "percent": 10.0}],
        )
    )
    entry = ledger.entry("ORD-7751")
    assert (entry.amount, entry.cross_border, entry.status) == (D("936.00"), True, "captured")
    assert [(r.key, r.amount) for r in gateway.calls] == [("ORD-7751/1", D("936.00"))]
    assert entry.parts[0].fee == D("36.80")
    assert [day_row(d) for d in report.days] == [(TUESDAY, 1, D("936.00"), D("36.80"), D("899.20"))]


def test_expired_coupon_order_placed_after_the_cutoff_settles_undiscounted_the_next_day():
    """README: "A coupon whose `expires_on` date is before the batch's business date is removed before it can be used." Settlement docs: "An order placed before `cutoff` [17:00 local time] settles on the local date on which it was placed; an order placed at the cutoff or later settles on the following date." """
    run, gateway, ledger, report = settle_batch(
        batch(
            [order("ORD-7740", 400.0, coupon_code="SPRING15", placed_at=at(2, 22, 30, offset=0))],
            coupons=[{"code": "SPRING15", "percent": 15.0, "expires_on": date(2024, 3, 31)}],
        )
    )
    assert run.decision("ORD-7740").discount == 0.0
    entry = ledger.entry("ORD-7740")
    assert (entry.amount, entry.settlement_date) == (D("400.00"), date(2024, 4, 3))
    assert [day_row(d) for d in report.days] == [(date(2024, 4, 3), 1, D("400.00"), D("11.90"), D("388.10"))]


def test_released_order_is_captured_by_the_next_settlement_with_its_coupon_and_surcharge():
    """README: "Once the last open hold on an order is released, the next run reopens the order and decides it like any other open order, with its coupon and surcharge." Settlement docs: "Orders that are `held` or in `review` get no ledger entry, so a later run that approves them lets the next settlement capture them." """
    from src.orders.gateway import ScriptedGateway
    from src.orders.settlement import Ledger, settle

    session = OrderDesk().open(
        batch(
            [order("ORD-7701", 120.0), order("ORD-7790", 640.0, country="DE", coupon_code="TEN")],
            coupons=[{"code": "TEN", "percent": 10.0}],
            signals=[{"order_id": "ORD-7790", "source": "riskscan", "score": 93}],
        )
    )
    session.run()
    gateway, ledger = ScriptedGateway(), Ledger()
    first = settle(session, gateway, ledger)
    assert listed(first, "captured") == (("ORD-7701",),)
    assert ledger.entry("ORD-7790") is None

    session.release_hold("ORD-7790")
    session.run()
    second = settle(session, gateway, ledger)
    assert listed(second, "captured") == (("ORD-7790",),)
    assert gateway.keys == ["ORD-7701/1", "ORD-7790/1"]
    entry = ledger.entry("ORD-7790")
    assert (entry.amount, entry.parts[0].fee) == (D("599.04"), D("23.66"))


def test_fully_discounted_orders_are_waived_at_home_and_abroad():
    """Settlement docs: "An order whose amount is below `minimum_capture` [0.50] is not sent to the gateway: its ledger entry is `waived`, with no parts." README: "Orders shipped outside the home country pay a cross-border surcharge of `surcharge_rate` (4% by default) of the subtotal after discount, rounded to the cent; customers in an exempt tier (gold by default) pay none." Settlement docs: "The report lists, each in order of processing, the orders that became `captured`, `declined` or `failed` in this settlement, the orders it recorded as `waived`, and every order that is still `pending` when it ends." """
    run, gateway, ledger, report = settle_batch(
        batch(
            [
                order("ORD-2", 40.0, "C-2", country="DE", coupon_code="FREE", placed_at=at(2, 11)),
                order("ORD-1", 40.0, coupon_code="FREE", placed_at=at(2, 9)),
            ],
            customers=[customer("C-1"), customer("C-2")],
            coupons=[{"code": "FREE", "percent": 100.0}],
        )
    )
    assert run.decision("ORD-2").total == 0.0
    assert gateway.calls == []
    # The docs fix no order among waived orders recorded in one settlement.
    assert sorted(report.waived) == ["ORD-1", "ORD-2"]
    assert listed(report, "captured", "days") == ((), ())
    for oid in ("ORD-1", "ORD-2"):
        entry = ledger.entry(oid)
        assert (entry.status, entry.amount, list(entry.parts)) == ("waived", D("0.00"), [])


def test_minimum_capture_is_the_smallest_amount_sent():
    """Settlement docs: "An order whose amount is below `minimum_capture` [0.50] is not sent to the gateway: its ledger entry is `waived`, with no parts." Settlement docs: "Each captured part pays a processing fee of `fee_rate` [2.9%] of the part's amount, plus `cross_border_fee_rate` [1%] of it when the order ships outside the batch's home country, plus `fee_fixed` [0.30]." """
    run, gateway, ledger, report = settle_batch(batch([order("ORD-1", 0.49), order("ORD-2", 0.50)]))
    assert gateway.keys == ["ORD-2/1"]
    assert listed(report, "waived", "captured") == (("ORD-1",), ("ORD-2",))
    assert ledger.entry("ORD-2").parts[0].fee == D("0.31")
    assert [day_row(d) for d in report.days] == [(TUESDAY, 1, D("0.50"), D("0.31"), D("0.19"))]


def test_single_use_coupon_discounts_one_of_the_customers_settled_orders():
    """README: "A coupon marked `single_use` gives its discount to at most one order per customer in a batch; the customer's other orders are priced without it." Settlement docs: "The report's `days` hold one `DayTotal` for each settlement date on which this settlement captured at least one part, in date order: the number of parts captured, their gross amount, their fees and their net (gross less fees)." """
    from src.orders.loader import parse_batch
    from src.orders.gateway import ScriptedGateway
    from src.orders.settlement import Ledger, settle

    the_batch = parse_batch(
        {
            "business_date": "2024-04-02",
            "customers": [{"id": "C-311", "credit_limit": "2,000.00"}],
            "orders": [
                {"id": "ORD-7802", "customer": "C-311", "subtotal": "200.00", "coupon": "welcome10"},
                {"id": "ORD-7803", "customer": "C-311", "subtotal": "200.00", "coupon": "welcome10"},
            ],
            "coupons": [{"code": "welcome10", "percent": 10, "single_use": True}],
        }
    )
    ledger = Ledger()
    report = settle(OrderDesk().process(the_batch), ScriptedGateway(), ledger)
    assert sorted(ledger.entry(oid).amount for oid in ("ORD-7802", "ORD-7803")) == [D("180.00"), D("200.00")]
    assert [day_row(d) for d in report.days] == [(TUESDAY, 2, D("380.00"), D("11.62"), D("368.38"))]


# -- settlement dates ----------------------------------------------------------


def test_cutoff_is_read_in_local_time_and_the_cutoff_minute_belongs_to_the_next_day():
    """Settlement docs: "Order times are read in the storefront's local time, which is UTC plus `utc_offset` [minus five hours]; the offset is fixed all year round." Settlement docs: "An order placed before `cutoff` [17:00 local time] settles on the local date on which it was placed; an order placed at the cutoff or later settles on the following date." """
    run, gateway, ledger, report = settle_batch(
        batch(
            [
                order("ORD-1", 10.0, placed_at=at(2, 21, 59, 59, offset=0)),
                order("ORD-2", 10.0, placed_at=at(2, 22, 0, 0, offset=0)),
                order("ORD-3", 10.0, placed_at=at(3, 3, 30, offset=0)),
            ]
        )
    )
    dates = [ledger.entry(oid).settlement_date for oid in ("ORD-1", "ORD-2", "ORD-3")]
    assert dates == [date(2024, 4, 2), date(2024, 4, 3), date(2024, 4, 3)]


def test_storefront_offset_decides_the_local_date():
    """Settlement docs: "Order times are read in the storefront's local time, which is UTC plus `utc_offset` [minus five hours]; the offset is fixed all year round." Settlement docs: "An order placed before `cutoff` [17:00 local time] settles on the local date on which it was placed; an order placed at the cutoff or later settles on the following date." """
    from src.orders.settlement import SettlementPolicy

    tokyo = SettlementPolicy(utc_offset=timedelta(hours=9))
    run, gateway, ledger, report = settle_batch(
        batch(
            [
                order("ORD-1", 10.0, placed_at=at(1, 20, offset=0)),
                order("ORD-2", 10.0, placed_at=at(2, 7, 59, offset=0)),
                order("ORD-3", 10.0, placed_at=at(2, 8, 0, offset=0)),
            ]
        ),
        policy=tokyo,
    )
    dates = [ledger.entry(oid).settlement_date for oid in ("ORD-1", "ORD-2", "ORD-3")]
    assert dates == [date(2024, 4, 2), date(2024, 4, 2), date(2024, 4, 3)]


def test_friday_evening_and_weekend_orders_settle_on_monday():
    """Settlement docs: "An order placed before `cutoff` [17:00 local time] settles on the local date on which it was placed; an order placed at the cutoff or later settles on the following date." Settlement docs: "Settlement dates are business days: a date that falls on a Saturday, a Sunday or one of the `holidays` moves to the next date that is none of these." """
    run, gateway, ledger, report = settle_batch(
        batch(
            [
                order("ORD-FRI-AM", 100.0, placed_at=at(5, 16, 59)),
                order("ORD-FRI-PM", 200.0, placed_at=at(5, 18, 0)),
                order("ORD-SAT", 50.0, placed_at=at(6, 10, 0)),
                order("ORD-SUN", 25.0, placed_at=at(7, 23, 0)),
            ],
            business_date=date(2024, 4, 8),
        )
    )
    dates = [ledger.entry(oid).settlement_date for oid in ("ORD-FRI-AM", "ORD-FRI-PM", "ORD-SAT", "ORD-SUN")]
    assert dates == [date(2024, 4, 5), date(2024, 4, 8), date(2024, 4, 8), date(2024, 4, 8)]


def test_holidays_move_a_date_past_the_weekend_as_often_as_needed():
    """Settlement docs: "Settlement dates are business days: a date that falls on a Saturday, a Sunday or one of the `holidays` moves to the next date that is none of these." Settlement docs: "An order placed before `cutoff` [17:00 local time] settles on the local date on which it was placed; an order placed at the cutoff or later settles on the following date." """
    from src.orders.settlement import SettlementPolicy

    policy = SettlementPolicy(holidays=(date(2024, 4, 8), date(2024, 4, 9), date(2024, 4, 4)))
    run, gateway, ledger, report = settle_batch(
        batch(
            [
                order("ORD-1", 10.0, placed_at=at(5, 17, 0)),
                order("ORD-2", 10.0, placed_at=at(3, 17, 30)),
                order("ORD-3", 10.0, placed_at=at(4, 9, 0)),
            ]
        ),
        policy=policy,
    )
    dates = [ledger.entry(oid).settlement_date for oid in ("ORD-1", "ORD-2", "ORD-3")]
    assert dates == [date(2024, 4, 10), date(2024, 4, 5), date(2024, 4, 5)]


def test_order_without_a_time_counts_as_placed_at_local_midnight_of_the_business_date():
    """Settlement docs: "An order without a `placed_at` time counts as placed at midnight, local time, at the start of the batch's business date." Settlement docs: "Settlement dates are business days: a date that falls on a Saturday, a Sunday or one of the `holidays` moves to the next date that is none of these." """
    run, gateway, ledger, report = settle_batch(batch([order("ORD-1", 75.0)], business_date=date(2024, 4, 6)))
    entry = ledger.entry("ORD-1")
    assert entry.settlement_date == date(2024, 4, 8)
    assert entry.placed_at == datetime(2024, 4, 6, 0, 0, tzinfo=LOCAL)
    assert [day_row(d) for d in report.days] == [(date(2024, 4, 8), 1, D("75.00"), D("2.48"), D("72.52"))]


def test_payload_timestamp_keeps_its_offset_and_decides_the_settlement_date():
    """README: "An order's `placed_at` is an ISO 8601 timestamp with a UTC offset (`-05:00`, or `Z` for UTC) and keeps the offset it was given; a timestamp without an offset is rejected." Settlement docs: "An order placed before `cutoff` [17:00 local time] settles on the local date on which it was placed; an order placed at the cutoff or later settles on the following date." """
    from src.orders.gateway import ScriptedGateway
    from src.orders.loader import parse_batch
    from src.orders.settlement import Ledger, settle

    the_batch = parse_batch(
        {
            "business_date": "2024-04-02",
            "customers": [{"id": "C-1", "credit_limit": 500}],
            "orders": [
                {"id": "ORD-1", "customer": "C-1", "subtotal": "20", "placed_at": "2024-04-02T23:30:00+02:00"},
                {"id": "ORD-2", "customer": "C-1", "subtotal": "20", "placed_at": "2024-04-02T12:00:00-05:00"},
            ],
        }
    )
    placed = the_batch.orders[0]["placed_at"]
    assert placed.utcoffset() == timedelta(hours=2)
    assert placed == datetime(2024, 4, 2, 21, 30, tzinfo=timezone.utc)
    ledger = Ledger()
    settle(OrderDesk().process(the_batch), ScriptedGateway(), ledger)
    assert ledger.entry("ORD-1").settlement_date == date(2024, 4, 2)
    assert ledger.entry("ORD-2").placed_at == datetime(2024, 4, 2, 17, 0, tzinfo=timezone.utc)


def test_payload_timestamp_without_an_offset_is_rejected():
    """README: "An order's `placed_at` is an ISO 8601 timestamp with a UTC offset (`-05:00`, or `Z` for UTC) and keeps the offset it was given; a timestamp without an offset is rejected." README: "A malformed payload raises `BatchError` naming the offending path (`orders[0].subtotal`)." """
    from src.orders.loader import BatchError, parse_batch

    payload = {
        "business_date": "2024-04-02",
        "customers": [{"id": "C-1", "credit_limit": 500}],
        "orders": [
            {"id": "ORD-1", "customer": "C-1", "subtotal": "20", "placed_at": "2024-04-02T10:00:00Z"},
            {"id": "ORD-2", "customer": "C-1", "subtotal": "20", "placed_at": "2024-04-02T10:00:00"},
        ],
    }
    with pytest.raises(BatchError) as info:
        parse_batch(payload)
    assert info.value.path == "orders[1].placed_at"


# -- parts and fees ------------------------------------------------------------


def test_large_order_is_captured_in_equal_parts_with_the_odd_cents_first():
    """Settlement docs: "A larger amount is captured in parts: the fewest parts that keep every part within the limit, as equal as the cents allow, with the earlier parts one cent larger than the later ones when the cents do not divide evenly." Settlement docs: "Each capture carries the idempotency key `<order id>/<part number>`, for example `ORD-7731/2`." """
    run, gateway, ledger, report = settle_batch(batch([order("ORD-7760", 4000.01)]))
    assert [(r.key, r.part, r.amount) for r in gateway.calls] == [
        ("ORD-7760/1", 1, D("1333.34")),
        ("ORD-7760/2", 2, D("1333.34")),
        ("ORD-7760/3", 3, D("1333.33")),
    ]
    assert parts(ledger.entry("ORD-7760")) == [
        (1, D("1333.34"), "captured"),
        (2, D("1333.34"), "captured"),
        (3, D("1333.33"), "captured"),
    ]
    assert listed(report, "captured") == (("ORD-7760",),)


def test_each_part_pays_its_own_rounded_fee_and_the_day_adds_them_up():
    """Settlement docs: "Each captured part pays a processing fee of `fee_rate` [2.9%] of the part's amount, plus `cross_border_fee_rate` [1%] of it when the order ships outside the batch's home country, plus `fee_fixed` [0.30]." Settlement docs: "A part counts on its order's settlement date, whichever night it is captured, and a day's fees are the sum of the fees of its captures." """
    run, gateway, ledger, report = settle_batch(batch([order("ORD-7760", 4000.01)]))
    assert [p.fee for p in ledger.entry("ORD-7760").parts] == [D("38.97"), D("38.97"), D("38.97")]
    assert [day_row(d) for d in report.days] == [(TUESDAY, 3, D("4000.01"), D("116.91"), D("3883.10"))]


def test_amount_at_the_capture_limit_is_one_part_and_a_cent_more_is_two():
    """Settlement docs: "The gateway accepts at most `capture_limit` [2,000.00] in one capture." Settlement docs: "A larger amount is captured in parts: the fewest parts that keep every part within the limit, as equal as the cents allow, with the earlier parts one cent larger than the later ones when the cents do not divide evenly." """
    run, gateway, ledger, report = settle_batch(
        batch([order("ORD-1", 2000.00, placed_at=at(2, 9)), order("ORD-2", 2000.01, placed_at=at(2, 10))])
    )
    assert [(r.key, r.amount) for r in gateway.calls] == [
        ("ORD-1/1", D("2000.00")),
        ("ORD-2/1", D("1000.01")),
        ("ORD-2/2", D("1000.00")),
    ]


def test_fees_round_half_up_to_the_cent():
    """Settlement docs: "The fee is rounded to the cent once, after these are added together, with halves rounded up (0.125 becomes 0.13)." Settlement docs: "The report's `days` hold one `DayTotal` for each settlement date on which this settlement captured at least one part, in date order: the number of parts captured, their gross amount, their fees and their net (gross less fees)." """
    run, gateway, ledger, report = settle_batch(
        batch([order("ORD-1", 5.00), order("ORD-2", 25.00), order("ORD-3", 45.00)])
    )
    assert [ledger.entry(oid).parts[0].fee for oid in ("ORD-1", "ORD-2", "ORD-3")] == [D("0.45"), D("1.03"), D("1.61")]
    assert [day_row(d) for d in report.days] == [(TUESDAY, 3, D("75.00"), D("3.09"), D("71.91"))]


def test_gold_customer_abroad_pays_no_surcharge_but_the_cross_border_fee_rounded_once():
    """README: "Orders shipped outside the home country pay a cross-border surcharge of `surcharge_rate` (4% by default) of the subtotal after discount, rounded to the cent; customers in an exempt tier (gold by default) pay none." Settlement docs: "Each captured part pays a processing fee of `fee_rate` [2.9%] of the part's amount, plus `cross_border_fee_rate` [1%] of it when the order ships outside the batch's home country, plus `fee_fixed` [0.30]." Settlement docs: "The fee is rounded to the cent once, after these are added together, with halves rounded up (0.125 becomes 0.13)." """
    run, gateway, ledger, report = settle_batch(
        batch([order("ORD-1", 15.50, "C-G", country="FR")], customers=[customer("C-G", tier="gold")])
    )
    entry = ledger.entry("ORD-1")
    assert (entry.amount, entry.cross_border) == (D("15.50"), True)
    assert entry.parts[0].fee == D("0.90")


def test_discounted_foreign_order_over_the_limit_is_split_and_each_part_pays_the_cross_border_fee():
    """README: "Orders shipped outside the home country pay a cross-border surcharge of `surcharge_rate` (4% by default) of the subtotal after discount, rounded to the cent; customers in an exempt tier (gold by default) pay none." Settlement docs: "A larger amount is captured in parts: the fewest parts that keep every part within the limit, as equal as the cents allow, with the earlier parts one cent larger than the later ones when the cents do not divide evenly." Settlement docs: "Each captured part pays a processing fee of `fee_rate` [2.9%] of the part's amount, plus `cross_border_fee_rate` [1%] of it when the order ships outside the batch's home country, plus `fee_fixed` [0.30]." """
    run, gateway, ledger, report = settle_batch(
        batch([order("ORD-1", 2500.0, country="DE", coupon_code="TEN")], coupons=[{"code": "TEN", "percent": 10.0}])
    )
    entry = ledger.entry("ORD-1")
    assert [(p.amount, p.fee) for p in entry.parts] == [(D("1170.00"), D("45.93")), (D("1170.00"), D("45.93"))]
    assert [day_row(d) for d in report.days] == [(TUESDAY, 2, D("2340.00"), D("91.86"), D("2248.14"))]


# -- gateway answers -----------------------------------------------------------


def test_declined_part_cancels_the_rest_and_earlier_parts_stay_captured():
    """Settlement docs: "A declined part is final: the order is `declined`, its remaining parts are cancelled and never sent, and it is never sent to the gateway again." Settlement docs: "Parts captured before the decline stay captured." Settlement docs: "A part counts on its order's settlement date, whichever night it is captured, and a day's fees are the sum of the fees of its captures." """
    from src.orders.settlement import settle

    run, gateway, ledger, report = settle_batch(batch([order("ORD-D", 4000.01)]), script={"ORD-D/2": "declined"})
    assert gateway.keys == ["ORD-D/1", "ORD-D/2"]
    entry = ledger.entry("ORD-D")
    assert entry.status == "declined"
    assert [p.status for p in entry.parts] == ["captured", "declined", "cancelled"]
    assert listed(report, "captured", "declined", "pending") == ((), ("ORD-D",), ())
    assert [day_row(d) for d in report.days] == [(TUESDAY, 1, D("1333.34"), D("38.97"), D("1294.37"))]

    again = settle(run, gateway, ledger)
    assert gateway.keys == ["ORD-D/1", "ORD-D/2"]
    assert listed(again, "declined", "days") == ((), ())


def test_unavailable_order_is_captured_the_next_night_and_counts_on_its_own_date():
    """Settlement docs: "When the gateway is unavailable, the part is sent again at the next settlement, and the order's later parts wait for it: they are not sent in this settlement." Settlement docs: "A part counts on its order's settlement date, whichever night it is captured, and a day's fees are the sum of the fees of its captures." Settlement docs: "Orders left pending by earlier settlements take their place in this order like any other; they need not be in the source." """
    from src.orders.settlement import settle

    run, gateway, ledger, report = settle_batch(batch([order("ORD-A", 100.0)]), script={"ORD-A": "unavailable"})
    assert listed(report, "pending", "days") == (("ORD-A",), ())
    assert ledger.entry("ORD-A").parts[0].attempts == 1

    tomorrow = OrderDesk().process(batch([order("ORD-B", 200.0)], business_date=date(2024, 4, 3)))
    second = settle(tomorrow, gateway, ledger)
    assert gateway.keys == ["ORD-A/1", "ORD-A/1", "ORD-B/1"]
    assert listed(second, "captured", "pending") == (("ORD-A", "ORD-B"), ())
    assert [day_row(d) for d in second.days] == [
        (date(2024, 4, 2), 1, D("100.00"), D("3.20"), D("96.80")),
        (date(2024, 4, 3), 1, D("200.00"), D("6.10"), D("193.90")),
    ]


def test_unavailable_part_holds_back_the_later_parts_until_the_next_settlement():
    """Settlement docs: "When the gateway is unavailable, the part is sent again at the next settlement, and the order's later parts wait for it: they are not sent in this settlement." Settlement docs: "Only `pending` orders are sent to the gateway, and a captured part is never sent again." """
    from src.orders.settlement import settle

    run, gateway, ledger, report = settle_batch(
        batch([order("ORD-S", 4000.01), order("ORD-T", 10.0, placed_at=at(2, 9))]),
        script={"ORD-S/2": "unavailable"},
    )
    assert gateway.keys == ["ORD-S/1", "ORD-S/2", "ORD-T/1"]
    entry = ledger.entry("ORD-S")
    assert [(p.status, p.attempts) for p in entry.parts] == [("captured", 0), ("pending", 1), ("pending", 0)]
    assert listed(report, "captured", "pending") == (("ORD-T",), ("ORD-S",))

    second = settle(run, gateway, ledger)
    assert gateway.keys[3:] == ["ORD-S/2", "ORD-S/3"]
    assert listed(second, "captured") == (("ORD-S",),)
    assert [day_row(d) for d in second.days] == [(TUESDAY, 2, D("2666.67"), D("77.94"), D("2588.73"))]


def test_third_unavailable_answer_fails_the_order_for_good():
    """Settlement docs: "A part answered unavailable `max_attempts` [3] times in all, over any number of settlements, fails: the order is `failed`, its remaining parts are cancelled, and it is never sent to the gateway again." """
    from src.orders.settlement import settle

    run, gateway, ledger, first = settle_batch(
        batch([order("ORD-A", 3000.0)]), script={"ORD-A/1": ["unavailable"] * 3}
    )
    second = settle(run, gateway, ledger)
    third = settle(run, gateway, ledger)
    fourth = settle(run, gateway, ledger)
    assert gateway.keys == ["ORD-A/1"] * 3
    assert listed(first, "pending") + listed(second, "pending", "failed") == (("ORD-A",), ("ORD-A",), ())
    assert listed(third, "failed", "pending") + listed(fourth, "failed") == (("ORD-A",), (), ())
    entry = ledger.entry("ORD-A")
    assert entry.status == "failed"
    assert [(p.amount, p.status, p.attempts) for p in entry.parts] == [
        (D("1500.00"), "failed", 3),
        (D("1500.00"), "cancelled", 0),
    ]


def test_two_unavailable_answers_in_a_row_stop_the_settlement():
    """Settlement docs: "Once the gateway has answered unavailable `outage_limit` [2] times in a row within one settlement, that settlement sends nothing more." Settlement docs: "Orders it had not reached stay pending and have no attempt counted." Settlement docs: "A settlement first adds a ledger entry for every approved order of its source that the ledger does not have yet, then sends the pending orders to the gateway one order at a time, all of an order's parts before the next order." """
    from src.orders.settlement import settle

    orders = [order(f"ORD-{c}", 10.0, placed_at=at(2, 9 + i)) for i, c in enumerate("ABCD")]
    run, gateway, ledger, report = settle_batch(
        batch(orders), script={"ORD-A": "unavailable", "ORD-B": "unavailable"}
    )
    assert gateway.keys == ["ORD-A/1", "ORD-B/1"]
    assert listed(report, "pending") == (("ORD-A", "ORD-B", "ORD-C", "ORD-D"),)
    assert [(ledger.entry(f"ORD-{c}").status, ledger.entry(f"ORD-{c}").parts[0].attempts) for c in "ABCD"] == [
        ("pending", 1),
        ("pending", 1),
        ("pending", 0),
        ("pending", 0),
    ]
    second = settle(run, gateway, ledger)
    assert gateway.keys[2:] == ["ORD-A/1", "ORD-B/1", "ORD-C/1", "ORD-D/1"]
    assert listed(second, "captured") == (("ORD-A", "ORD-B", "ORD-C", "ORD-D"),)


def test_a_capture_or_a_decline_ends_a_run_of_unavailable_answers():
    """Settlement docs: "Once the gateway has answered unavailable `outage_limit` [2] times in a row within one settlement, that settlement sends nothing more." Settlement docs: "A capture or a decline ends a run of unavailable answers." """
    from src.orders.settlement import settle

    orders = [order(f"ORD-{c}", 10.0, placed_at=at(2, 9 + i)) for i, c in enumerate("ABCDE")]
    run, gateway, ledger, report = settle_batch(
        batch(orders[::-1]),
        script={"ORD-A": "unavailable", "ORD-B": "declined", "ORD-C": "unavailable", "ORD-E": "unavailable"},
    )
    assert gateway.keys == ["ORD-A/1", "ORD-B/1", "ORD-C/1", "ORD-D/1", "ORD-E/1"]
    assert listed(report, "captured", "declined", "pending") == (("ORD-D",), ("ORD-B",), ("ORD-A", "ORD-C", "ORD-E"))
    second = settle(run, gateway, ledger)
    assert gateway.keys[5:] == ["ORD-A/1", "ORD-C/1", "ORD-E/1"]
    assert listed(second, "captured", "declined", "pending") == (("ORD-A", "ORD-C", "ORD-E"), (), ())


def test_failing_answers_that_trip_the_outage_limit_still_count_as_attempts():
    """Settlement docs: "A part answered unavailable `max_attempts` [3] times in all, over any number of settlements, fails: the order is `failed`, its remaining parts are cancelled, and it is never sent to the gateway again." Settlement docs: "Once the gateway has answered unavailable `outage_limit` [2] times in a row within one settlement, that settlement sends nothing more." Settlement docs: "Orders it had not reached stay pending and have no attempt counted." """
    from src.orders.settlement import SettlementPolicy, settle

    policy = SettlementPolicy(max_attempts=2, outage_limit=2)
    orders = [order(f"ORD-{c}", 10.0, placed_at=at(2, 9 + i)) for i, c in enumerate("ABC")]
    run, gateway, ledger, first = settle_batch(
        batch(orders), script={"ORD-A": ["unavailable"] * 2, "ORD-B": ["unavailable"] * 2}, policy=policy
    )
    second = settle(run, gateway, ledger, policy)
    assert gateway.keys == ["ORD-A/1", "ORD-B/1", "ORD-A/1", "ORD-B/1"]
    assert listed(second, "failed", "pending") == (("ORD-A", "ORD-B"), ("ORD-C",))
    assert ledger.entry("ORD-C").parts[0].attempts == 0
    third = settle(run, gateway, ledger, policy)
    assert gateway.keys[4:] == ["ORD-C/1"]
    assert listed(third, "captured", "failed", "pending") == (("ORD-C",), (), ())


def test_crash_keeps_what_was_recorded_and_the_part_in_flight_is_sent_again(tmp_path):
    """Settlement docs: "Any other exception from the gateway is a crash." Settlement docs: "`settle` lets it propagate; the part that was being sent is not counted as attempted and is sent again, with the same idempotency key, by the next settlement." Settlement docs: "Settlement records everything that one gateway answer changes about an order (the part, the parts it cancels, the order's status) as one change, and records each answer before it sends anything more to the gateway." Settlement docs: "After a crash at any point, a `Ledger` opened on the same files holds every change that was made before the crash and, of the change that was being made when it crashed, either all of it or nothing of it." """
    from src.orders.gateway import ScriptedGateway
    from src.orders.settlement import Ledger, settle

    path = tmp_path / "captures.json"
    run = OrderDesk().process(batch([order("ORD-A", 100.0, placed_at=at(2, 9)), order("ORD-B", 2500.0, placed_at=at(2, 10))]))
    with pytest.raises(RuntimeError):
        settle(run, ScriptedGateway({"ORD-B/2": RuntimeError("connection reset")}), Ledger(path))

    reopened = Ledger(path)
    a, b = reopened.entry("ORD-A"), reopened.entry("ORD-B")
    assert (a.status, a.parts[0].fee, a.parts[0].reference) == ("captured", D("3.20"), "GW-0001")
    assert b.status == "pending"
    assert [(p.number, p.amount, p.status, p.attempts) for p in b.parts] == [
        (1, D("1250.00"), "captured", 0),
        (2, D("1250.00"), "pending", 0),
    ]
    gateway = ScriptedGateway()
    report = settle(run, gateway, reopened)
    assert gateway.keys == ["ORD-B/2"]
    assert listed(report, "captured") == (("ORD-B",),)
    assert [day_row(d) for d in report.days] == [(TUESDAY, 1, D("1250.00"), D("36.55"), D("1213.45"))]


def test_a_reopened_ledger_resends_the_exact_amounts_it_recorded(tmp_path):
    """Settlement docs: "After a crash at any point, a `Ledger` opened on the same files holds every change that was made before the crash and, of the change that was being made when it crashed, either all of it or nothing of it." Settlement docs: "An order that already has an entry never gets a second one, and its amount, parts and settlement date are never recomputed, even when a later run gives the order a different total." """
    from src.orders.gateway import ScriptedGateway
    from src.orders.settlement import Ledger, settle

    path = tmp_path / "captures.json"
    placed = at(5, 17, 30, offset=-4)
    run = OrderDesk().process(batch([order("ORD-L", 4000.01, placed_at=placed)], business_date=date(2024, 4, 5)))
    settle(run, ScriptedGateway({"ORD-L/2": "unavailable"}), Ledger(path))

    reopened = Ledger(path)
    entry = reopened.entry("ORD-L")
    assert (entry.amount, entry.settlement_date, entry.placed_at) == (D("4000.01"), date(2024, 4, 5), placed)
    assert [(p.amount, p.status, p.attempts) for p in entry.parts] == [
        (D("1333.34"), "captured", 0),
        (D("1333.34"), "pending", 1),
        (D("1333.33"), "pending", 0),
    ]
    gateway = ScriptedGateway()
    report = settle(run, gateway, reopened)
    assert [(r.key, str(r.amount)) for r in gateway.calls] == [("ORD-L/2", "1333.34"), ("ORD-L/3", "1333.33")]
    assert [day_row(d) for d in report.days] == [(date(2024, 4, 5), 2, D("2666.67"), D("77.94"), D("2588.73"))]


# -- order of processing and the ledger ----------------------------------------


def test_orders_are_sent_by_settlement_date_then_time_placed_then_id():
    """Settlement docs: "Pending orders are sent in order of settlement date, then the time they were placed, then order id." Settlement docs: "An order without a `placed_at` time counts as placed at midnight, local time, at the start of the batch's business date." Settlement docs: "The report lists, each in order of processing, the orders that became `captured`, `declined` or `failed` in this settlement, the orders it recorded as `waived`, and every order that is still `pending` when it ends." """
    run, gateway, ledger, report = settle_batch(
        batch(
            [
                order("ORD-Z1", 10.0, placed_at=at(2, 16)),
                order("ORD-A2", 10.0, placed_at=at(2, 18)),
                order("ORD-C", 10.0, placed_at=at(2, 9)),
                order("ORD-B", 10.0, placed_at=at(2, 14, offset=0)),
                order("ORD-M", 10.0),
                order("ORD-P", 10.0, placed_at=at(2, 15, 30, offset=2)),
            ]
        )
    )
    expected = ["ORD-M", "ORD-P", "ORD-B", "ORD-C", "ORD-Z1", "ORD-A2"]
    assert gateway.keys == [f"{oid}/1" for oid in expected]
    assert listed(report, "captured") == (tuple(expected),)


def test_orders_left_pending_take_their_place_among_the_next_nights_orders():
    """Settlement docs: "Pending orders are sent in order of settlement date, then the time they were placed, then order id." Settlement docs: "Orders left pending by earlier settlements take their place in this order like any other; they need not be in the source." Settlement docs: "A part counts on its order's settlement date, whichever night it is captured, and a day's fees are the sum of the fees of its captures." """
    from src.orders.settlement import settle

    run, gateway, ledger, first = settle_batch(
        batch([order("ORD-A", 100.0, placed_at=at(2, 10))]), script={"ORD-A": "unavailable"}
    )
    tomorrow = OrderDesk().process(
        batch(
            [order("ORD-N1", 200.0, placed_at=at(3, 8)), order("ORD-N0", 50.0, placed_at=at(2, 16, 30))],
            business_date=date(2024, 4, 3),
        )
    )
    second = settle(tomorrow, gateway, ledger)
    assert gateway.keys[1:] == ["ORD-A/1", "ORD-N0/1", "ORD-N1/1"]
    assert listed(second, "captured") == (("ORD-A", "ORD-N0", "ORD-N1"),)
    assert [day_row(d) for d in second.days] == [
        (date(2024, 4, 2), 2, D("150.00"), D("4.95"), D("145.05")),
        (date(2024, 4, 3), 1, D("200.00"), D("6.10"), D("193.90")),
    ]


def test_pending_order_is_retried_for_its_recorded_amount_after_a_rerun_changes_its_total():
    """Settlement docs: "An order that already has an entry never gets a second one, and its amount, parts and settlement date are never recomputed, even when a later run gives the order a different total." Settlement docs: "When the gateway is unavailable, the part is sent again at the next settlement, and the order's later parts wait for it: they are not sent in this settlement." """
    from src.orders.settlement import settle

    run, gateway, ledger, first = settle_batch(batch([order("ORD-1", 250.0)]), script={"ORD-1": "unavailable"})
    rerun = OrderDesk().process(batch([order("ORD-1", 2600.0, placed_at=at(2, 20))]))
    second = settle(rerun, gateway, ledger)
    assert [(r.key, r.amount) for r in gateway.calls] == [("ORD-1/1", D("250.00")), ("ORD-1/1", D("250.00"))]
    entry = ledger.entry("ORD-1")
    assert (entry.amount, entry.settlement_date, entry.status) == (D("250.00"), TUESDAY, "captured")
    assert len(ledger.entries()) == 1
    assert listed(second, "captured") == (("ORD-1",),)


def test_days_are_reported_in_date_order_with_gross_fees_and_net():
    """Settlement docs: "The report's `days` hold one `DayTotal` for each settlement date on which this settlement captured at least one part, in date order: the number of parts captured, their gross amount, their fees and their net (gross less fees)." Settlement docs: "Settlement dates are business days: a date that falls on a Saturday, a Sunday or one of the `holidays` moves to the next date that is none of these." """
    run, gateway, ledger, report = settle_batch(
        batch(
            [
                order("ORD-X", 100.0, placed_at=at(5, 18)),
                order("ORD-Y", 200.0, placed_at=at(2, 10)),
                order("ORD-Z", 50.0, placed_at=at(3, 17)),
            ]
        )
    )
    assert listed(report, "captured") == (("ORD-Y", "ORD-Z", "ORD-X"),)
    assert [day_row(d) for d in report.days] == [
        (date(2024, 4, 2), 1, D("200.00"), D("6.10"), D("193.90")),
        (date(2024, 4, 4), 1, D("50.00"), D("1.75"), D("48.25")),
        (date(2024, 4, 8), 1, D("100.00"), D("3.20"), D("96.80")),
    ]
