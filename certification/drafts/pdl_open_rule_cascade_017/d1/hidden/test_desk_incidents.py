from datetime import date

from src.orders import Batch, OrderDesk
from src.orders.report import order_trace

BUSINESS_DATE = date(2024, 4, 2)


def customer(cid, limit, **extra):
    return {"id": cid, "credit_limit": limit, **extra}


def order(oid, cid, subtotal, **extra):
    return {"id": oid, "customer_id": cid, "subtotal": subtotal, **extra}


def summary(decision):
    return (
        decision.status,
        decision.total,
        decision.approved_amount,
        decision.referred_amount,
        decision.coupon,
    )


def stale_total_batch():
    return Batch(
        BUSINESS_DATE,
        customers=[customer("C-88", 1220.0)],
        orders=[order("ORD-7731", "C-88", 1200.0, country="DE")],
    )


def fraud_held_batch(**order_extra):
    return Batch(
        BUSINESS_DATE,
        customers=[customer("C-52", 2000.0)],
        orders=[order("ORD-7790", "C-52", 640.0, **order_extra)],
        coupons=[{"code": "TEN", "percent": 10.0}],
        signals=[{"order_id": "ORD-7790", "source": "riskscan", "score": 93}],
    )


# -- decisions on current figures --------------------------------------------


def test_surcharge_that_pushes_the_total_over_the_limit_refers_instead_of_approving():
    """Issue: "the surcharge made the total 1,248.00, yet the order ended `approved` with an Approval of 1,200.00, and it also has a Referral for 1,248.00." README: "A run leaves every order in exactly one of `held`, `review` and `approved`, and an order is approved or referred for its final total, never for an amount from earlier in the run." """
    run = OrderDesk().process(stale_total_batch())
    decision = run.decision("ORD-7731")
    assert summary(decision) == ("review", 1248.0, None, 1248.0, None)
    assert run.engine.find("Approval") == []


def test_dropped_approval_is_explained_in_the_audit_log():
    """Issue: "every order in the batch decided on its final figures, with the audit log explaining anything that was queued and then dropped" Engine docs: "Whatever leaves the agenda without firing is recorded in the audit log as a ``withdrawn`` entry; :mod:`src.audit` lists the reasons." """
    run = OrderDesk().process(stale_total_batch())
    assert "approve_order" not in run.audit.fired_rules()
    assert any(e.rule == "approve_order" for e in run.audit.of_kind("withdrawn"))


def test_pending_decisions_always_carry_the_current_total():
    """Engine docs: "Changes are handled as they happen, so :meth:`Engine.pending` is accurate between any two changes, not only when the next activation fires." """
    engine = OrderDesk().load(stale_total_batch())
    while engine.step() is not None:
        current = engine.memory.by_key("Order", "ORD-7731")
        for activation in engine.pending():
            if activation.rule_name in ("approve_order", "refer_over_limit"):
                assert activation.bindings["total"] == current.total
                assert activation.fact("order").total == current.total


def test_expired_coupon_is_not_applied():
    """README: "A coupon whose `expires_on` date is before the batch's business date is removed before it can be used." """
    run = OrderDesk().process(
        Batch(
            BUSINESS_DATE,
            customers=[customer("C-88", 1220.0)],
            orders=[order("ORD-7740", "C-88", 400.0, coupon_code="SPRING15")],
            coupons=[{"code": "SPRING15", "percent": 15.0, "expires_on": date(2024, 3, 31)}],
        )
    )
    assert summary(run.decision("ORD-7740")) == ("approved", 400.0, 400.0, None, None)
    assert run.engine.find("DiscountApplied") == []
    assert "apply_coupon" not in run.audit.fired_rules()


def test_coupon_that_brings_the_total_under_the_limit_approves_the_discounted_total():
    """README: "A run leaves every order in exactly one of `held`, `review` and `approved`, and an order is approved or referred for its final total, never for an amount from earlier in the run." """
    run = OrderDesk().process(
        Batch(
            BUSINESS_DATE,
            customers=[customer("C-5", 1250.0)],
            orders=[order("ORD-1", "C-5", 1300.0, coupon_code="TEN")],
            coupons=[{"code": "TEN", "percent": 10.0}],
        )
    )
    assert summary(run.decision("ORD-1")) == ("approved", 1170.0, 1170.0, None, "TEN")
    assert run.engine.find("Referral") == []
    assert order_trace(run, "ORD-1").count("approve_order") == 1


def test_new_account_hold_is_not_followed_by_an_approval():
    """Issue: "the new-account hold was placed, yet the order came out `approved` with both the Hold and an Approval." """
    run = OrderDesk().process(
        Batch(
            BUSINESS_DATE,
            customers=[customer("C-9", 5000.0, account_age_days=6)],
            orders=[order("ORD-7795", "C-9", 1500.0, coupon_code="TEN")],
            coupons=[{"code": "TEN", "percent": 10.0}],
        )
    )
    decision = run.decision("ORD-7795")
    assert decision.status == "held"
    assert decision.holds == ("new account (6 days) ordering 1500.00",)
    assert decision.approved_amount is None
    assert run.engine.find("Approval") == []


def test_two_high_fraud_signals_hold_the_order_once():
    """Rulebook docs: "Each hold rule records a ``Hold`` fact naming itself, and does not hold an order it has held before, released or not." """
    run = OrderDesk().process(
        Batch(
            BUSINESS_DATE,
            customers=[customer("C-1", 5000.0)],
            orders=[order("ORD-1", "C-1", 300.0)],
            signals=[
                {"order_id": "ORD-1", "source": "riskscan", "score": 95},
                {"order_id": "ORD-1", "source": "chargeguard", "score": 88},
            ],
        )
    )
    assert run.decision("ORD-1").status == "held"
    assert len(run.engine.find("Hold", order_id="ORD-1")) == 1


# -- surcharge -----------------------------------------------------------------


def test_surcharge_is_charged_on_the_discounted_subtotal():
    """README: "Orders shipped outside the home country pay a cross-border surcharge of `surcharge_rate` (4% by default) of the subtotal after discount, rounded to the cent; customers in an exempt tier (gold by default) pay none." """
    run = OrderDesk().process(
        Batch(
            BUSINESS_DATE,
            customers=[customer("C-40", 2000.0)],
            orders=[order("ORD-7751", "C-40", 1000.0, country="DE", coupon_code="TEN")],
            coupons=[{"code": "TEN", "percent": 10.0}],
        )
    )
    decision = run.decision("ORD-7751")
    assert (decision.discount, decision.surcharge) == (100.0, 36.0)
    assert summary(decision) == ("approved", 936.0, 936.0, None, "TEN")


def test_surcharge_rounds_to_the_cent_after_discount():
    """README: "Orders shipped outside the home country pay a cross-border surcharge of `surcharge_rate` (4% by default) of the subtotal after discount, rounded to the cent; customers in an exempt tier (gold by default) pay none." """
    run = OrderDesk().process(
        Batch(
            BUSINESS_DATE,
            customers=[customer("C-40", 2000.0)],
            orders=[order("ORD-2", "C-40", 321.45, country="FR", coupon_code="SPRING15")],
            coupons=[{"code": "SPRING15", "percent": 15.0}],
        )
    )
    decision = run.decision("ORD-2")
    assert (decision.discount, decision.surcharge) == (48.22, 10.93)
    assert decision.total == decision.approved_amount == 284.16


def test_gold_customer_with_coupon_abroad_pays_no_surcharge():
    """README: "Orders shipped outside the home country pay a cross-border surcharge of `surcharge_rate` (4% by default) of the subtotal after discount, rounded to the cent; customers in an exempt tier (gold by default) pay none." """
    run = OrderDesk().process(
        Batch(
            BUSINESS_DATE,
            customers=[customer("C-41", 2000.0, tier="gold")],
            orders=[order("ORD-3", "C-41", 1000.0, country="DE", coupon_code="TEN")],
            coupons=[{"code": "TEN", "percent": 10.0}],
        )
    )
    decision = run.decision("ORD-3")
    assert decision.surcharge == 0.0
    assert summary(decision) == ("approved", 900.0, 900.0, None, "TEN")


def test_surcharge_after_discount_decides_the_credit_limit():
    """README: "A run leaves every order in exactly one of `held`, `review` and `approved`, and an order is approved or referred for its final total, never for an amount from earlier in the run." """
    run = OrderDesk().process(
        Batch(
            BUSINESS_DATE,
            customers=[customer("C-42", 938.0), customer("C-43", 935.0)],
            orders=[
                order("ORD-4", "C-42", 1000.0, country="DE", coupon_code="TEN"),
                order("ORD-5", "C-43", 1000.0, country="DE", coupon_code="TEN"),
            ],
            coupons=[{"code": "TEN", "percent": 10.0}],
        )
    )
    assert summary(run.decision("ORD-4")) == ("approved", 936.0, 936.0, None, "TEN")
    assert summary(run.decision("ORD-5")) == ("review", 936.0, None, 936.0, "TEN")


# -- single-use coupons ----------------------------------------------------------


def test_single_use_coupon_discounts_only_one_order_per_customer():
    """README: "A coupon marked `single_use` gives its discount to at most one order per customer in a batch; the customer's other orders are priced without it." """
    run = OrderDesk().process(
        Batch(
            BUSINESS_DATE,
            customers=[customer("C-311", 2000.0)],
            orders=[
                order("ORD-7802", "C-311", 180.0, coupon_code="WELCOME10"),
                order("ORD-7803", "C-311", 240.0, coupon_code="WELCOME10"),
            ],
            coupons=[{"code": "WELCOME10", "percent": 10.0, "single_use": True}],
        )
    )
    decisions = [run.decision("ORD-7802"), run.decision("ORD-7803")]
    assert len(run.engine.find("DiscountApplied")) == 1
    discounted = [d for d in decisions if d.coupon == "WELCOME10"]
    full_price = [d for d in decisions if d.coupon is None]
    assert len(discounted) == 1 and len(full_price) == 1
    assert discounted[0].discount == round(discounted[0].subtotal * 0.10, 2)
    assert full_price[0].discount == 0.0 and full_price[0].total == full_price[0].subtotal
    for d in decisions:
        assert d.status == "approved" and d.approved_amount == d.total


def test_single_use_is_per_customer_and_other_coupons_are_unlimited():
    """README: "A coupon marked `single_use` gives its discount to at most one order per customer in a batch; the customer's other orders are priced without it." """
    run = OrderDesk().process(
        Batch(
            BUSINESS_DATE,
            customers=[customer("C-1", 2000.0), customer("C-2", 2000.0)],
            orders=[
                order("ORD-1", "C-1", 200.0, coupon_code="WELCOME10"),
                order("ORD-2", "C-2", 300.0, coupon_code="WELCOME10"),
                order("ORD-3", "C-2", 300.0, coupon_code="WELCOME10"),
                order("ORD-4", "C-2", 100.0, coupon_code="TEN"),
                order("ORD-5", "C-2", 500.0, coupon_code="TEN"),
            ],
            coupons=[
                {"code": "WELCOME10", "percent": 10.0, "single_use": True},
                {"code": "TEN", "percent": 10.0},
            ],
        )
    )
    discounts = {oid: d.discount for oid, d in run.decisions.items()}
    assert (discounts["ORD-1"], discounts["ORD-4"], discounts["ORD-5"]) == (20.0, 10.0, 50.0)
    assert sorted([discounts["ORD-2"], discounts["ORD-3"]]) == [0.0, 30.0]


def test_single_use_flag_from_the_storefront_payload_is_honoured():
    """Issue: "our nightly export marks it `"single_use": true` and we load the export with `parse_batch`, as always." README: "A coupon marked `single_use` gives its discount to at most one order per customer in a batch; the customer's other orders are priced without it." """
    from src.orders.loader import parse_batch

    batch = parse_batch(
        {
            "business_date": "2024-04-02",
            "customers": [{"id": "C-311", "credit_limit": "2,000.00"}],
            "orders": [
                {"id": "ORD-7802", "customer": "C-311", "subtotal": "180.00", "coupon": "welcome10"},
                {"id": "ORD-7803", "customer": "C-311", "subtotal": "240.00", "coupon": "welcome10"},
            ],
            "coupons": [{"code": "welcome10", "percent": 10, "single_use": True}],
        }
    )
    run = OrderDesk().process(batch)
    coupons = sorted((d.coupon or "-") for d in run.decisions.values())
    assert coupons == ["-", "WELCOME10"]
    assert all(d.approved_amount == d.total for d in run.decisions.values())


# -- releasing holds -------------------------------------------------------------


def test_released_fraud_hold_lets_the_order_be_decided():
    """Issue: "the reviewer released the hold in the console (`session.release_hold("ORD-7790")`, then `session.run()`), and the order stayed `held`" README: "Once the last open hold on an order is released, the next run reopens the order and decides it like any other open order, with its coupon and surcharge." """
    session = OrderDesk().open(fraud_held_batch())
    session.run()
    assert session.decision("ORD-7790").status == "held"
    session.release_hold("ORD-7790")
    session.run()
    decision = session.decision("ORD-7790")
    assert summary(decision) == ("approved", 640.0, 640.0, None, None)
    assert session.engine.find("Hold", order_id="ORD-7790")[0].released is True


def test_released_order_gets_its_coupon_and_surcharge():
    """README: "Once the last open hold on an order is released, the next run reopens the order and decides it like any other open order, with its coupon and surcharge." """
    session = OrderDesk().open(fraud_held_batch(coupon_code="TEN", country="CA"))
    session.run()
    session.release_hold("ORD-7790")
    session.run()
    decision = session.decision("ORD-7790")
    assert (decision.discount, decision.surcharge) == (64.0, 23.04)
    assert summary(decision) == ("approved", 599.04, 599.04, None, "TEN")


def test_released_order_over_the_limit_is_referred():
    """README: "Once the last open hold on an order is released, the next run reopens the order and decides it like any other open order, with its coupon and surcharge." """
    batch = Batch(
        BUSINESS_DATE,
        customers=[customer("C-53", 500.0)],
        orders=[order("ORD-7791", "C-53", 640.0)],
        signals=[{"order_id": "ORD-7791", "source": "riskscan", "score": 99}],
    )
    session = OrderDesk().open(batch)
    session.run()
    session.release_hold("ORD-7791")
    session.run()
    assert summary(session.decision("ORD-7791")) == ("review", 640.0, None, 640.0, None)


def test_order_stays_held_until_its_last_hold_is_released():
    """README: "Once the last open hold on an order is released, the next run reopens the order and decides it like any other open order, with its coupon and surcharge." Decision docs: "``holds`` lists the reasons of the order's holds that are still open, in the order they were placed (released holds are not listed)" """
    batch = Batch(
        BUSINESS_DATE,
        customers=[customer("C-9", 5000.0, account_age_days=6)],
        orders=[order("ORD-7796", "C-9", 1500.0)],
        signals=[{"order_id": "ORD-7796", "source": "riskscan", "score": 90}],
    )
    session = OrderDesk().open(batch)
    session.run()
    assert session.decision("ORD-7796").holds == ("fraud signal from riskscan (score 90)",)
    session.release_hold("ORD-7796")
    session.run()
    decision = session.decision("ORD-7796")
    assert decision.status == "held"
    assert decision.holds == ("new account (6 days) ordering 1500.00",)
    session.release_hold("ORD-7796")
    session.run()
    decision = session.decision("ORD-7796")
    assert decision.holds == ()
    assert summary(decision) == ("approved", 1500.0, 1500.0, None, None)
    assert order_trace(session, "ORD-7796").count("hold_new_account_large_order") == 1


def test_release_in_a_mixed_batch_touches_only_that_order():
    """README: "Once the last open hold on an order is released, the next run reopens the order and decides it like any other open order, with its coupon and surcharge." README: "A run leaves every order in exactly one of `held`, `review` and `approved`, and an order is approved or referred for its final total, never for an amount from earlier in the run." """
    batch = Batch(
        BUSINESS_DATE,
        customers=[customer("C-52", 2000.0), customer("C-88", 1220.0)],
        orders=[
            order("ORD-7790", "C-52", 640.0),
            order("ORD-7731", "C-88", 1200.0, country="DE"),
            order("ORD-7792", "C-52", 90.0),
        ],
        signals=[
            {"order_id": "ORD-7790", "source": "riskscan", "score": 93},
            {"order_id": "ORD-7792", "source": "riskscan", "score": 97},
        ],
    )
    session = OrderDesk().open(batch)
    session.run()
    fired_before = len(session.audit.fired_rules())
    session.release_hold("ORD-7790")
    session.run()
    decisions = session.decisions
    assert summary(decisions["ORD-7790"]) == ("approved", 640.0, 640.0, None, None)
    assert summary(decisions["ORD-7731"]) == ("review", 1248.0, None, 1248.0, None)
    assert decisions["ORD-7792"].status == "held"
    assert decisions["ORD-7792"].approved_amount is None
    released = session.engine.memory.by_key("Order", "ORD-7790").fact_id
    later = session.audit.of_kind("fired")[fired_before:]
    assert [e.rule for e in later][0] == "reopen_released_order"
    assert "approve_order" in [e.rule for e in later]
    assert all(released in e.fact_ids for e in later)


def test_mixed_batch_decides_every_order_on_current_facts():
    """Issue: "We have more customers with coupons, surcharges and holds in the same batch, so please don't fix just these five orders." README: "A run leaves every order in exactly one of `held`, `review` and `approved`, and an order is approved or referred for its final total, never for an amount from earlier in the run." """
    run = OrderDesk().process(
        Batch(
            BUSINESS_DATE,
            customers=[
                customer("C-88", 1220.0),
                customer("C-311", 2000.0),
                customer("C-9", 5000.0, account_age_days=6),
            ],
            orders=[
                order("ORD-7731", "C-88", 1200.0, country="DE"),
                order("ORD-7740", "C-88", 400.0, coupon_code="SPRING15"),
                order("ORD-7751", "C-311", 1000.0, country="DE", coupon_code="TEN"),
                order("ORD-7795", "C-9", 1500.0),
            ],
            coupons=[
                {"code": "SPRING15", "percent": 15.0, "expires_on": date(2024, 3, 31)},
                {"code": "TEN", "percent": 10.0},
            ],
        )
    )
    assert {oid: summary(d) for oid, d in run.decisions.items()} == {
        "ORD-7731": ("review", 1248.0, None, 1248.0, None),
        "ORD-7740": ("approved", 400.0, 400.0, None, None),
        "ORD-7751": ("approved", 936.0, 936.0, None, "TEN"),
        "ORD-7795": ("held", 1500.0, None, None, None),
    }
