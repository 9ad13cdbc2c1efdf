from src.engine import Engine
from src.patterns import Pattern
from src.rules import RuleBook
from src.schema import Schema, field


def make_schema():
    schema = Schema()
    schema.define(
        "Ticket",
        key="ref",
        ref=str,
        priority=int,
        status=field(str, "new"),
        note=field(str, ""),
    )
    schema.define("Agent", key="name", name=str, capacity=int)
    schema.define("Voucher", key="code", code=str, ticket=str, expired=field(bool, False))
    return schema


def escalation_engine(strategy="depth"):
    """One rule: tickets with priority >= 3 escalate, recording what the action saw."""
    book = RuleBook(make_schema())
    seen = []

    @book.rule("escalate", Pattern("Ticket", "ticket", where="priority >= 3", bind={"p": "priority"}))
    def escalate(ctx):
        seen.append((ctx["ticket"].ref, ctx.var("p"), ctx["ticket"].priority))

    return Engine(book, strategy=strategy), seen


# -- retraction ------------------------------------------------------------


def test_activation_of_retracted_fact_does_not_fire():
    engine, seen = escalation_engine()
    ticket = engine.assert_fact("Ticket", ref="T1", priority=5)
    engine.retract(ticket)
    result = engine.run()
    assert result.fired == 0
    assert seen == []


def test_retraction_removes_the_activation_from_pending():
    engine, _ = escalation_engine()
    first = engine.assert_fact("Ticket", ref="T1", priority=5)
    second = engine.assert_fact("Ticket", ref="T2", priority=4)
    engine.retract(first)
    assert [a.fact_ids for a in engine.pending()] == [(second.fact_id,)]


def test_retracting_one_fact_leaves_the_other_activation():
    engine, seen = escalation_engine()
    first = engine.assert_fact("Ticket", ref="T1", priority=5)
    engine.assert_fact("Ticket", ref="T2", priority=4)
    engine.retract(first)
    engine.run()
    assert seen == [("T2", 4, 4)]


def test_fact_retracted_by_a_higher_salience_rule_does_not_feed_a_join():
    book = RuleBook(make_schema())
    redeemed = []

    @book.rule("void_expired", Pattern("Voucher", "voucher", where="expired == True"), salience=10)
    def void_expired(ctx):
        ctx.retract(ctx["voucher"])

    @book.rule(
        "redeem",
        Pattern("Ticket", "ticket", bind={"ref": "ref"}),
        Pattern("Voucher", "voucher", where="ticket == $ref"),
    )
    def redeem(ctx):
        redeemed.append(ctx["voucher"].code)

    engine = Engine(book)
    engine.assert_fact("Voucher", code="V-OLD", ticket="T1", expired=True)
    engine.assert_fact("Voucher", code="V-NEW", ticket="T1")
    engine.assert_fact("Ticket", ref="T1", priority=1)
    engine.run()
    assert redeemed == ["V-NEW"]
    assert engine.audit.fired_rules() == ["void_expired", "redeem"]


def test_withdrawal_on_retraction_is_audited():
    engine, _ = escalation_engine()
    ticket = engine.assert_fact("Ticket", ref="T1", priority=5)
    engine.retract(ticket)
    withdrawn = engine.audit.of_kind("withdrawn")
    assert [(e.rule, e.fact_ids) for e in withdrawn] == [("escalate", (ticket.fact_id,))]


# -- modification ----------------------------------------------------------


def test_modify_that_breaks_the_condition_prevents_firing():
    engine, seen = escalation_engine()
    ticket = engine.assert_fact("Ticket", ref="T1", priority=5)
    engine.modify(ticket, priority=1)
    assert engine.run().fired == 0
    assert seen == []


def test_modify_that_breaks_the_condition_empties_pending_and_is_audited():
    engine, _ = escalation_engine()
    ticket = engine.assert_fact("Ticket", ref="T1", priority=5)
    engine.modify(ticket, priority=1)
    assert engine.pending() == []
    withdrawn = engine.audit.of_kind("withdrawn")
    assert [(e.rule, e.fact_ids) for e in withdrawn] == [("escalate", (ticket.fact_id,))]


def test_modify_that_keeps_the_condition_fires_once_with_new_values():
    engine, seen = escalation_engine()
    ticket = engine.assert_fact("Ticket", ref="T1", priority=3)
    engine.modify(ticket, priority=7)
    result = engine.run()
    assert result.fired == 1
    assert seen == [("T1", 7, 7)]
    assert result.firings[0].bindings["p"] == 7


def test_pending_activation_shows_current_bindings_after_modify():
    engine, _ = escalation_engine()
    ticket = engine.assert_fact("Ticket", ref="T1", priority=3)
    engine.modify(ticket, priority=8)
    pending = engine.pending()
    assert len(pending) == 1
    assert pending[0].bindings["p"] == 8
    assert pending[0].fact("ticket").priority == 8


def test_condition_false_then_true_again_fires_once_with_latest_values():
    engine, seen = escalation_engine()
    ticket = engine.assert_fact("Ticket", ref="T1", priority=5)
    engine.modify(ticket, priority=1)
    engine.modify(ticket, priority=8)
    engine.run()
    assert seen == [("T1", 8, 8)]


def test_several_modifies_before_running_fire_once():
    engine, seen = escalation_engine()
    ticket = engine.assert_fact("Ticket", ref="T1", priority=3)
    for priority in (4, 5, 6):
        engine.modify(ticket, priority=priority)
    assert len(engine.pending()) == 1
    engine.run()
    assert seen == [("T1", 6, 6)]


def test_modified_fact_is_the_most_recent_change_under_depth():
    engine, seen = escalation_engine("depth")
    engine.assert_fact("Ticket", ref="T1", priority=3)
    middle = engine.assert_fact("Ticket", ref="T2", priority=3)
    engine.assert_fact("Ticket", ref="T3", priority=3)
    engine.modify(middle, priority=4)
    engine.run()
    assert [ref for ref, _, _ in seen] == ["T2", "T3", "T1"]


def test_modified_fact_goes_to_the_back_under_breadth():
    engine, seen = escalation_engine("breadth")
    engine.assert_fact("Ticket", ref="T1", priority=3)
    middle = engine.assert_fact("Ticket", ref="T2", priority=3)
    engine.assert_fact("Ticket", ref="T3", priority=3)
    engine.modify(middle, priority=4)
    engine.run()
    assert [ref for ref, _, _ in seen] == ["T1", "T3", "T2"]


def assignment_engine():
    book = RuleBook(make_schema())
    seen = []

    @book.rule(
        "assign",
        Pattern("Ticket", "ticket", bind={"p": "priority"}),
        Pattern("Agent", "agent", where="capacity >= $p", bind={"cap": "capacity"}),
    )
    def assign(ctx):
        seen.append((ctx["agent"].name, ctx.var("cap")))

    return Engine(book), seen


def test_modifying_the_joined_fact_withdraws_the_activation():
    engine, seen = assignment_engine()
    agent = engine.assert_fact("Agent", name="ann", capacity=5)
    engine.assert_fact("Ticket", ref="T1", priority=3)
    engine.modify(agent, capacity=2)
    engine.run()
    assert seen == []


def test_modifying_the_joined_fact_rebinds_the_activation():
    engine, seen = assignment_engine()
    agent = engine.assert_fact("Agent", name="ann", capacity=5)
    engine.assert_fact("Ticket", ref="T1", priority=3)
    engine.modify(agent, capacity=9)
    engine.run()
    assert seen == [("ann", 9)]


def test_higher_salience_modify_makes_a_queued_rule_inapplicable():
    book = RuleBook(make_schema())
    paged = []

    @book.rule("triage", Pattern("Ticket", "ticket", where='status == "new"'), salience=10)
    def triage(ctx):
        ctx.modify(ctx["ticket"], status="triaged")

    @book.rule("page_oncall", Pattern("Ticket", "ticket", where='status == "new" and priority >= 3'))
    def page_oncall(ctx):
        paged.append(ctx["ticket"].ref)

    engine = Engine(book)
    engine.assert_fact("Ticket", ref="T1", priority=4)
    engine.run()
    assert paged == []
    assert engine.audit.fired_rules() == ["triage"]


def test_higher_salience_modify_rebinds_a_queued_rule():
    book = RuleBook(make_schema())
    notified = []

    @book.rule("bump", Pattern("Ticket", "ticket", where='status == "new"', bind={"p": "priority"}), salience=10)
    def bump(ctx):
        ctx.modify(ctx["ticket"], status="triaged", priority=ctx.var("p") + 1)

    @book.rule("notify", Pattern("Ticket", "ticket", where="priority >= 3", bind={"p": "priority"}))
    def notify(ctx):
        notified.append(ctx.var("p"))

    engine = Engine(book)
    engine.assert_fact("Ticket", ref="T1", priority=3)
    engine.run()
    assert notified == [4]
