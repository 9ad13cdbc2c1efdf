from datetime import date

from src.orders import Batch, OrderDesk
from src.orders.report import order_trace

BUSINESS_DATE = date(2024, 4, 2)


def stale_total_batch():
    return Batch(
        BUSINESS_DATE,
        customers=[{"id": "C-88", "credit_limit": 1220.0}],
        orders=[{"id": "ORD-7731", "customer_id": "C-88", "subtotal": 1200.0, "country": "DE"}],
    )


def expired_coupon_batch():
    return Batch(
        BUSINESS_DATE,
        customers=[{"id": "C-88", "credit_limit": 1220.0}],
        orders=[
            {"id": "ORD-7740", "customer_id": "C-88", "subtotal": 400.0, "coupon_code": "SPRING15"}
        ],
        coupons=[{"code": "SPRING15", "percent": 15.0, "expires_on": date(2024, 3, 31)}],
    )


def test_surcharge_that_pushes_total_over_limit_refers_instead_of_approving():
    run = OrderDesk().process(stale_total_batch())
    decision = run.decision("ORD-7731")
    assert decision.total == 1248.0
    assert decision.status == "review"
    assert decision.referred_amount == 1248.0
    assert decision.approved_amount is None
    assert run.engine.find("Approval") == []


def test_stale_approval_is_withdrawn_in_the_audit_log():
    run = OrderDesk().process(stale_total_batch())
    assert "approve_order" not in run.audit.fired_rules()
    assert any(e.rule == "approve_order" for e in run.audit.of_kind("withdrawn"))


def test_pending_approvals_always_carry_the_current_total():
    engine = OrderDesk().load(stale_total_batch())
    while engine.step() is not None:
        order = engine.memory.by_key("Order", "ORD-7731")
        for activation in engine.pending():
            if activation.rule_name in ("approve_order", "refer_over_limit"):
                assert activation.bindings["total"] == order.total
                assert activation.fact("order").total == order.total


def test_expired_coupon_is_not_applied():
    run = OrderDesk().process(expired_coupon_batch())
    decision = run.decision("ORD-7740")
    assert decision.discount == 0.0
    assert decision.coupon is None
    assert decision.total == 400.0
    assert run.engine.find("DiscountApplied") == []
    assert decision.approved_amount == 400.0


def test_expired_coupon_activation_is_withdrawn_in_the_audit_log():
    run = OrderDesk().process(expired_coupon_batch())
    assert "apply_coupon" not in run.audit.fired_rules()
    assert any(e.rule == "apply_coupon" for e in run.audit.of_kind("withdrawn"))


def test_coupon_that_brings_total_under_limit_approves_the_discounted_total():
    run = OrderDesk().process(
        Batch(
            BUSINESS_DATE,
            customers=[{"id": "C-5", "credit_limit": 1250.0}],
            orders=[{"id": "ORD-1", "customer_id": "C-5", "subtotal": 1300.0, "coupon_code": "TEN"}],
            coupons=[{"code": "TEN", "percent": 10.0}],
        )
    )
    decision = run.decision("ORD-1")
    assert decision.total == 1170.0
    assert decision.status == "approved"
    assert decision.approved_amount == 1170.0
    assert run.engine.find("Referral") == []
    assert order_trace(run, "ORD-1").count("approve_order") == 1


def test_approval_amount_includes_the_surcharge():
    run = OrderDesk().process(
        Batch(
            BUSINESS_DATE,
            customers=[{"id": "C-5", "credit_limit": 1000.0}],
            orders=[{"id": "ORD-1", "customer_id": "C-5", "subtotal": 500.0, "country": "DE"}],
        )
    )
    decision = run.decision("ORD-1")
    assert decision.status == "approved"
    assert decision.approved_amount == 520.0 == decision.total


def test_approval_amount_is_the_discounted_total():
    run = OrderDesk().process(
        Batch(
            BUSINESS_DATE,
            customers=[{"id": "C-5", "credit_limit": 1000.0}],
            orders=[{"id": "ORD-1", "customer_id": "C-5", "subtotal": 400.0, "coupon_code": "SPRING15"}],
            coupons=[{"code": "SPRING15", "percent": 15.0, "expires_on": date(2024, 4, 30)}],
        )
    )
    assert run.decision("ORD-1").approved_amount == 340.0


def test_new_account_hold_is_not_followed_by_an_approval():
    run = OrderDesk().process(
        Batch(
            BUSINESS_DATE,
            customers=[{"id": "C-9", "credit_limit": 5000.0, "account_age_days": 6}],
            orders=[{"id": "ORD-1", "customer_id": "C-9", "subtotal": 1500.0}],
        )
    )
    decision = run.decision("ORD-1")
    assert decision.status == "held"
    assert decision.holds == ("new account (6 days) ordering 1500.00",)
    assert decision.approved_amount is None


def test_mixed_batch_decides_every_order_on_current_facts():
    run = OrderDesk().process(
        Batch(
            BUSINESS_DATE,
            customers=[
                {"id": "C-88", "credit_limit": 1220.0},
                {"id": "C-2", "credit_limit": 900.0},
            ],
            orders=[
                {"id": "ORD-7731", "customer_id": "C-88", "subtotal": 1200.0, "country": "DE"},
                {"id": "ORD-7740", "customer_id": "C-88", "subtotal": 400.0, "coupon_code": "SPRING15"},
                {"id": "ORD-7741", "customer_id": "C-2", "subtotal": 800.0, "coupon_code": "WELCOME5"},
            ],
            coupons=[
                {"code": "SPRING15", "percent": 15.0, "expires_on": date(2024, 3, 31)},
                {"code": "WELCOME5", "percent": 5.0},
            ],
        )
    )
    summary = {
        oid: (d.status, d.total, d.approved_amount, d.referred_amount, d.coupon)
        for oid, d in run.decisions.items()
    }
    assert summary == {
        "ORD-7731": ("review", 1248.0, None, 1248.0, None),
        "ORD-7740": ("approved", 400.0, 400.0, None, None),
        "ORD-7741": ("approved", 760.0, 760.0, None, "WELCOME5"),
    }
