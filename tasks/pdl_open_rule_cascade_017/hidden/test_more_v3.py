from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal

from src.orders import Batch, OrderDesk

D = Decimal
TUESDAY = date(2024, 4, 2)
LOCAL = timezone(timedelta(hours=-5))


# -- helpers -------------------------------------------------------------------


def engine_schema():
    from src.schema import Schema, field

    schema = Schema()
    schema.define(
        "Ticket",
        key="ref",
        ref=str,
        priority=int,
        status=field(str, "new"),
        owner=field(str, ""),
        note=field(str, ""),
    )
    schema.define("Agent", key="name", name=str, capacity=int)
    schema.define("Page", ticket=str, agent=str)
    schema.define("Bid", lot=str, bidder=str, amount=int)
    return schema


def paging_book(fired):
    """A rulebook with one rule: page a ticket that has no Page yet."""
    from src.patterns import Pattern
    from src.rules import RuleBook

    book = RuleBook(engine_schema())

    @book.rule(
        "page_unassigned",
        Pattern("Ticket", "ticket", bind={"ref": "ref"}),
        Pattern("Page", "page", where="ticket == $ref", absent=True),
    )
    def page_unassigned(ctx):
        fired.append(ctx["ticket"].ref)

    @book.rule("agent_on_duty", Pattern("Agent", "agent"))
    def agent_on_duty(ctx):
        fired.append("agent " + ctx["agent"].name)

    return book


def customer(cid, limit=10000.0, **extra):
    return {"id": cid, "credit_limit": limit, **extra}


def order(oid, subtotal, cid="C-1", **extra):
    return {"id": oid, "customer_id": cid, "subtotal": subtotal, **extra}


def day_row(day):
    return (day.settlement_date, day.captures, day.gross, day.fees, day.net)


# -- the engine ------------------------------------------------------------------


def test_an_action_sees_every_field_of_its_facts_as_they_stand_when_the_rule_fires():
    """src/engine.py (RuleContext): "``ctx[alias]`` (or ``ctx.fact(alias)``) is the fact matched by the pattern with that alias as it stands when the rule fires, every field included;" src/engine.py: "Rules that read none of the changed fields are left alone, so a rule does not fire again because an unrelated field changed." """
    from src.engine import Engine
    from src.patterns import Pattern
    from src.rules import RuleBook

    book = RuleBook(engine_schema())
    seen = []

    @book.rule("escalate", Pattern("Ticket", "ticket", where="priority >= 3"), salience=10)
    def escalate(ctx):
        ctx.modify(ctx["ticket"], note="escalated", owner="ann")

    @book.rule("report", Pattern("Ticket", "ticket", where='status == "new"'), salience=1)
    def report(ctx):
        seen.append((ctx["ticket"].ref, ctx["ticket"].note, ctx.fact("ticket").owner, ctx["ticket"].version))

    engine = Engine(book)
    engine.assert_fact("Ticket", ref="T1", priority=5)
    engine.assert_fact("Ticket", ref="T2", priority=1)
    result = engine.run()
    assert result.rule_names == ["escalate", "report", "report"]
    assert sorted(seen) == [("T1", "escalated", "ann", 2), ("T2", "", "", 1)]


def test_an_activation_that_still_matches_after_a_modify_is_refreshed_with_its_new_bindings():
    """src/audit.py: "An activation that still matches after a modify is not withdrawn: it is refreshed, and a new ``activated`` entry records its new bindings;" src/engine.py: "every rule that reads one of the changed fields is matched against the fact again as though it had just been asserted." src/engine.py: "An activation fires at most once" """
    from src.engine import Engine
    from src.patterns import Pattern
    from src.rules import RuleBook

    book = RuleBook(engine_schema())
    seen = []

    @book.rule("urgent", Pattern("Ticket", "ticket", where="priority >= 3", bind={"p": "priority"}))
    def urgent(ctx):
        seen.append((ctx["ticket"].ref, ctx.var("p")))

    engine = Engine(book)
    ticket = engine.assert_fact("Ticket", ref="T1", priority=5)
    engine.modify(ticket, priority=7)
    tick = engine.memory.tick
    entries = [
        (e.kind, e.rule, e.fact_ids, dict(e.detail.get("bindings") or {}))
        for e in engine.audit.of_kind("activated", "withdrawn")
    ]
    assert entries == [
        ("activated", "urgent", (ticket.fact_id,), {"p": 5}),
        ("activated", "urgent", (ticket.fact_id,), {"p": 7}),
    ]
    assert [(a.describe(), a.stamp, dict(a.bindings)) for a in engine.pending()] == [
        (f"urgent[ticket={ticket.fact_id}]", tick, {"p": 7})
    ]
    assert engine.run().fired == 1
    assert seen == [("T1", 7)]


def test_a_fact_that_stops_blocking_activates_only_the_matches_nothing_else_blocks():
    """src/engine.py: "When a fact stops blocking (it is retracted, or modified so that it no longer passes the tests), the matches it was blocking, and only those, are activated again, stamped with the tick of that change, unless another live fact still blocks them." """
    from src.engine import Engine

    fired = []
    engine = Engine(paging_book(fired))
    t1 = engine.assert_fact("Ticket", ref="T1", priority=2)
    t2 = engine.assert_fact("Ticket", ref="T2", priority=2)
    engine.run()
    first = engine.assert_fact("Page", ticket="T1", agent="ann")
    second = engine.assert_fact("Page", ticket="T1", agent="bob")
    engine.assert_fact("Page", ticket="T2", agent="cy")

    engine.retract(first)
    assert engine.pending() == []  # the second page still blocks T1
    engine.modify(second, ticket="T9")
    tick = engine.memory.tick
    assert [(a.describe(), a.stamp) for a in engine.pending()] == [(f"page_unassigned[ticket={t1.fact_id}]", tick)]
    engine.run()
    assert sorted(fired[:2]) == ["T1", "T2"] and fired[2:] == ["T1"]


def test_a_rule_fires_again_for_the_same_facts_once_the_fact_that_blocked_it_is_gone():
    """src/engine.py: "An activation fires at most once; a rule fires again for the same facts only after a change to a field it reads makes it match again, or after a fact that blocked it stops blocking." src/engine.py: "the matches it was blocking, and only those, are activated again, stamped with the tick of that change" src/agenda.py: "recency of the working-memory change that created the activation: most recent first under the ``depth`` strategy (the default)" """
    from src.engine import Engine

    fired = []
    engine = Engine(paging_book(fired))
    engine.assert_fact("Ticket", ref="T1", priority=2)
    engine.run()
    page = engine.assert_fact("Page", ticket="T1", agent="ann")
    assert engine.run().fired == 0
    engine.assert_fact("Agent", name="zed", capacity=1)
    engine.retract(page)
    engine.assert_fact("Agent", name="amy", capacity=1)
    engine.run()
    assert fired == ["T1", "agent amy", "T1", "agent zed"]
    assert engine.run().fired == 0


def test_an_absent_pattern_over_the_rules_own_fact_type_follows_its_blockers():
    """src/engine.py: "A fact that starts to block an absent pattern (it is asserted, or modified so that it passes the pattern's tests) takes the activations it blocks off the agenda." src/engine.py: "When a fact stops blocking (it is retracted, or modified so that it no longer passes the tests), the matches it was blocking, and only those, are activated again, stamped with the tick of that change, unless another live fact still blocks them." """
    from src.engine import Engine
    from src.patterns import Pattern
    from src.rules import RuleBook

    book = RuleBook(engine_schema())
    leaders = []

    @book.rule(
        "leader",
        Pattern("Bid", "bid", bind={"lot": "lot", "amount": "amount"}),
        Pattern("Bid", "higher", where="lot == $lot and amount > $amount", absent=True),
    )
    def leader(ctx):
        leaders.append((ctx["bid"].bidder, ctx.var("amount")))

    engine = Engine(book)
    ann = engine.assert_fact("Bid", lot="L1", bidder="ann", amount=10)
    bob = engine.assert_fact("Bid", lot="L1", bidder="bob", amount=20)
    assert [a.describe() for a in engine.pending()] == [f"leader[bid={bob.fact_id}]"]
    engine.modify(bob, amount=5)
    assert [(a.describe(), a.stamp) for a in engine.pending()] == [(f"leader[bid={ann.fact_id}]", engine.memory.tick)]
    engine.run()
    engine.modify(ann, amount=1)
    assert [(a.describe(), a.stamp) for a in engine.pending()] == [(f"leader[bid={bob.fact_id}]", engine.memory.tick)]
    engine.run()
    assert leaders == [("ann", 10), ("bob", 5)]


def test_activations_leaving_the_agenda_without_firing_are_audited_with_their_reason():
    """src/engine.py: "Whatever leaves the agenda without firing is recorded in the audit log as a ``withdrawn`` entry; :mod:`src.audit` lists the reasons." src/audit.py: "Its ``detail['reason']`` is ``rule disabled``, ``fact retracted`` (one of its facts left working memory), ``no longer matches`` (a modify made the rule stop matching its facts) or ``blocked`` (a fact now blocks one of the rule's absent patterns)." """
    from src.engine import Engine
    from src.patterns import Pattern
    from src.rules import RuleBook

    book = RuleBook(engine_schema())

    @book.rule(
        "page_urgent",
        Pattern("Ticket", "ticket", where="priority >= 3", bind={"ref": "ref"}),
        Pattern("Page", "page", where="ticket == $ref", absent=True),
    )
    def page_urgent(ctx):
        pass

    engine = Engine(book)
    t1 = engine.assert_fact("Ticket", ref="T1", priority=5)
    t2 = engine.assert_fact("Ticket", ref="T2", priority=5)
    t3 = engine.assert_fact("Ticket", ref="T3", priority=5)
    engine.assert_fact("Page", ticket="T1", agent="ann")
    engine.modify(t2, priority=1)
    engine.retract(t3)
    withdrawn = [(e.rule, e.fact_ids, e.detail["reason"]) for e in engine.audit.of_kind("withdrawn")]
    assert withdrawn == [
        ("page_urgent", (t1.fact_id,), "blocked"),
        ("page_urgent", (t2.fact_id,), "no longer matches"),
        ("page_urgent", (t3.fact_id,), "fact retracted"),
    ]
    assert engine.pending() == []
    assert engine.run().fired == 0


# -- the order desk ----------------------------------------------------------------


def test_released_holds_are_not_listed_among_a_decisions_holds():
    """src/orders/desk.py (Decision): "``holds`` lists the reasons of the order's holds that are still open, in the order they were placed (released holds are not listed)" README: "Once the last open hold on an order is released, the next run reopens the order and decides it like any other open order, with its coupon and surcharge." """
    session = OrderDesk().open(
        Batch(
            TUESDAY,
            customers=[customer("C-1")],
            orders=[order("ORD-7790", 640.0), order("ORD-7791", 80.0)],
            signals=[
                {"order_id": "ORD-7790", "source": "riskscan", "score": 93},
                {"order_id": "ORD-7791", "source": "riskscan", "score": 88},
            ],
        )
    )
    session.run()
    assert session.decision("ORD-7790").holds == ("fraud signal from riskscan (score 93)",)
    session.release_hold("ORD-7790")
    assert session.decision("ORD-7790").holds == ()
    session.run()
    released, still_held = session.decision("ORD-7790"), session.decision("ORD-7791")
    assert (released.status, released.holds, released.approved_amount) == ("approved", (), 640.0)
    assert (still_held.status, still_held.holds) == ("held", ("fraud signal from riskscan (score 88)",))


def test_an_order_held_by_both_hold_rules_is_decided_on_its_final_figures_after_its_last_release():
    """README: "An open order is held when an external fraud screen scores it at or above `fraud_score_threshold`, or when an account younger than `new_account_days` places an order whose total reaches `new_account_order_limit`." README: "Once the last open hold on an order is released, the next run reopens the order and decides it like any other open order, with its coupon and surcharge." src/orders/rulebook.py: "Each hold rule records a ``Hold`` fact naming itself, and does not hold an order it has held before, released or not." Settlement docs: "The amount settled for an order is its final total." """
    from src.orders.gateway import ScriptedGateway
    from src.orders.settlement import Ledger, settle

    session = OrderDesk().open(
        Batch(
            TUESDAY,
            customers=[customer("C-5", 5000.0, account_age_days=6)],
            orders=[order("ORD-1", 1500.0, "C-5", country="DE", coupon_code="TEN")],
            coupons=[{"code": "TEN", "percent": 10.0}],
            signals=[{"order_id": "ORD-1", "source": "riskscan", "score": 95}],
        )
    )
    gateway, ledger = ScriptedGateway(), Ledger()
    session.run()
    assert [h.rule for h in session.open_holds("ORD-1")] == ["screen_fraud_signal"]

    session.release_hold("ORD-1")
    session.run()
    decision = session.decision("ORD-1")
    assert (decision.status, decision.approved_amount) == ("held", None)
    assert [h.rule for h in session.open_holds("ORD-1")] == ["hold_new_account_large_order"]
    assert settle(session, gateway, ledger).captured == ()

    session.release_hold("ORD-1")
    session.run()
    decision = session.decision("ORD-1")
    assert (decision.status, decision.discount, decision.surcharge, decision.total) == ("approved", 150.0, 54.0, 1404.0)
    assert (decision.approved_amount, decision.coupon) == (1404.0, "TEN")
    assert session.open_holds("ORD-1") == []
    assert len(session.engine.find("Hold", order_id="ORD-1")) == 2
    report = settle(session, gateway, ledger)
    assert [(r.key, r.amount) for r in gateway.calls] == [("ORD-1/1", D("1404.00"))]
    assert [day_row(d) for d in report.days] == [(TUESDAY, 1, D("1404.00"), D("55.06"), D("1348.94"))]


def test_a_new_accounts_large_order_is_held_and_never_approved_or_settled():
    """README: "An open order is held when an external fraud screen scores it at or above `fraud_score_threshold`, or when an account younger than `new_account_days` places an order whose total reaches `new_account_order_limit`." src/orders/rulebook.py: "Each hold rule records a ``Hold`` fact naming itself, and does not hold an order it has held before, released or not." README: "A run leaves every order in exactly one of `held`, `review` and `approved`, and an order is approved or referred for its final total, never for an amount from earlier in the run." Settlement docs: "Only orders whose status is `approved` are settled." """
    from src.orders.gateway import ScriptedGateway
    from src.orders.settlement import Ledger, settle

    run = OrderDesk().process(
        Batch(
            TUESDAY,
            customers=[customer("C-6", 5000.0, account_age_days=6)],
            orders=[order("ORD-7795", 1200.0, "C-6"), order("ORD-7796", 999.99, "C-6")],
        )
    )
    held, small = run.decision("ORD-7795"), run.decision("ORD-7796")
    assert (held.status, held.approved_amount, held.referred_amount) == ("held", None, None)
    assert [h.rule for h in run.engine.find("Hold", order_id="ORD-7795")] == ["hold_new_account_large_order"]
    assert len(held.holds) == 1
    assert run.engine.find("Approval", order_id="ORD-7795") == []
    assert (small.status, small.approved_amount, small.holds) == ("approved", 999.99, ())
    gateway, ledger = ScriptedGateway(), Ledger()
    report = settle(run, gateway, ledger)
    assert gateway.keys == ["ORD-7796/1"]
    assert ledger.entry("ORD-7795") is None
    assert (report.captured, report.pending) == (("ORD-7796",), ())


def test_orders_are_approved_or_referred_once_for_their_final_total():
    """README: "A run leaves every order in exactly one of `held`, `review` and `approved`, and an order is approved or referred for its final total, never for an amount from earlier in the run." README: "Orders shipped outside the home country pay a cross-border surcharge of `surcharge_rate` (4% by default) of the subtotal after discount, rounded to the cent; customers in an exempt tier (gold by default) pay none." src/orders/desk.py (Decision): "``approved_amount`` and ``referred_amount`` come from the order's latest Approval and Referral" """
    run = OrderDesk().process(
        Batch(
            TUESDAY,
            customers=[customer("C-88", 1220.0), customer("C-9", 9000.0)],
            orders=[
                order("ORD-7731", 1200.0, "C-88", country="DE"),
                order("ORD-7751", 1000.0, "C-9", country="DE", coupon_code="TEN"),
            ],
            coupons=[{"code": "TEN", "percent": 10.0}],
        )
    )
    referred, approved = run.decision("ORD-7731"), run.decision("ORD-7751")
    assert (referred.status, referred.total, referred.approved_amount, referred.referred_amount) == (
        "review", 1248.0, None, 1248.0,
    )
    assert (approved.status, approved.total, approved.approved_amount, approved.referred_amount) == (
        "approved", 936.0, 936.0, None,
    )
    assert [a.amount for a in run.engine.find("Approval")] == [936.0]
    assert [r.amount for r in run.engine.find("Referral")] == [1248.0]


# -- settlement ----------------------------------------------------------------------


def test_parts_are_sent_and_recorded_with_two_decimal_places():
    """src/orders/gateway.py (CaptureRequest): "``key`` is the idempotency key, ``part`` counts from 1 and ``amount`` is a :class:`~decimal.Decimal` with two decimal places." Settlement docs: "All amounts in the ledger and in the report are `decimal.Decimal` values in the storefront's currency, to the cent." Settlement docs: "A larger amount is captured in parts: the fewest parts that keep every part within the limit, as equal as the cents allow, with the earlier parts one cent larger than the later ones when the cents do not divide evenly." """
    from src.orders.gateway import ScriptedGateway
    from src.orders.settlement import Ledger, settle

    run = OrderDesk().process(
        Batch(
            TUESDAY,
            customers=[customer("C-1")],
            orders=[
                order("ORD-1", 3000.20, placed_at=datetime(2024, 4, 2, 9, tzinfo=LOCAL)),
                order("ORD-2", 6000.00, placed_at=datetime(2024, 4, 2, 10, tzinfo=LOCAL)),
            ],
        )
    )
    gateway, ledger = ScriptedGateway(), Ledger()
    report = settle(run, gateway, ledger)
    assert [(r.key, str(r.amount)) for r in gateway.calls] == [
        ("ORD-1/1", "1500.10"),
        ("ORD-1/2", "1500.10"),
        ("ORD-2/1", "2000.00"),
        ("ORD-2/2", "2000.00"),
        ("ORD-2/3", "2000.00"),
    ]
    recorded = [(str(p.amount), str(p.fee)) for oid in ("ORD-1", "ORD-2") for p in ledger.entry(oid).parts]
    assert recorded == [
        ("1500.10", "43.80"),
        ("1500.10", "43.80"),
        ("2000.00", "58.30"),
        ("2000.00", "58.30"),
        ("2000.00", "58.30"),
    ]
    assert [tuple(str(v) for v in day_row(d)[2:]) for d in report.days] == [("9000.20", "262.50", "8737.70")]


def test_a_night_with_a_timeout_a_split_holidays_and_a_late_eu_order_all_at_once():
    """Settlement docs: "Order times are read in the storefront's local time, which is UTC plus `utc_offset` [minus five hours]; the offset is fixed all year round." Settlement docs: "An order placed before `cutoff` [17:00 local time] settles on the local date on which it was placed; an order placed at the cutoff or later settles on the following date." Settlement docs: "Settlement dates are business days: a date that falls on a Saturday, a Sunday or one of the `holidays` moves to the next date that is none of these." Settlement docs: "When the gateway is unavailable, the part is sent again at the next settlement, and the order's later parts wait for it: they are not sent in this settlement." Settlement docs: "Pending orders are sent in order of settlement date, then the time they were placed, then order id." Settlement docs: "A part counts on its order's settlement date, whichever night it is captured, and a day's fees are the sum of the fees of its captures." """
    from src.orders.gateway import ScriptedGateway
    from src.orders.loader import parse_batch
    from src.orders.settlement import Ledger, SettlementPolicy, settle

    policy = SettlementPolicy(holidays=(date(2024, 3, 29), date(2024, 4, 1)))
    thursday = parse_batch(
        {
            "business_date": "2024-03-28",
            "customers": [{"id": "C-1", "credit_limit": "9,000.00"}],
            "orders": [
                {"id": "ORD-EU", "customer": "C-1", "subtotal": "250.00", "country": "de",
                 "placed_at": "2024-03-28T23:30:00+01:00"},
                {"id": "ORD-BIG", "customer": "C-1", "subtotal": "4,000.01",
                 "placed_at": "2024-03-28T10:00:00-05:00"},
                {"id": "ORD-LATE", "customer": "C-1", "subtotal": "40.00",
                 "placed_at": "2024-03-28T21:59:00Z"},
            ],
        }
    )
    gateway, ledger = ScriptedGateway({"ORD-BIG/2": "unavailable"}), Ledger()
    first = settle(OrderDesk().process(thursday), gateway, ledger, policy)
    assert [ledger.entry(oid).settlement_date for oid in ("ORD-EU", "ORD-BIG", "ORD-LATE")] == [
        date(2024, 4, 2), date(2024, 3, 28), date(2024, 3, 28),
    ]
    assert gateway.keys == ["ORD-BIG/1", "ORD-BIG/2", "ORD-LATE/1", "ORD-EU/1"]
    assert (first.captured, first.pending) == (("ORD-LATE", "ORD-EU"), ("ORD-BIG",))
    assert [day_row(d) for d in first.days] == [
        (date(2024, 3, 28), 2, D("1373.34"), D("40.43"), D("1332.91")),
        (date(2024, 4, 2), 1, D("260.00"), D("10.44"), D("249.56")),
    ]

    tuesday = OrderDesk().process(
        Batch(
            TUESDAY,
            customers=[customer("C-1")],
            orders=[order("ORD-NEW", 100.0, placed_at=datetime(2024, 4, 2, 8, tzinfo=LOCAL))],
        )
    )
    second = settle(tuesday, gateway, ledger, policy)
    assert gateway.keys[4:] == ["ORD-BIG/2", "ORD-BIG/3", "ORD-NEW/1"]
    assert (second.captured, second.pending) == (("ORD-BIG", "ORD-NEW"), ())
    assert [day_row(d) for d in second.days] == [
        (date(2024, 3, 28), 2, D("2666.67"), D("77.94"), D("2588.73")),
        (date(2024, 4, 2), 1, D("100.00"), D("3.20"), D("96.80")),
    ]
