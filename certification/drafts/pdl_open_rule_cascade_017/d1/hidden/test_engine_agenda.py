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
    schema.define("Freeze", team=str, active=field(bool, True))
    return schema


def escalation_engine(strategy="depth"):
    """One rule: tickets with priority >= 3 escalate, recording what the action saw."""
    book = RuleBook(make_schema())
    seen = []

    @book.rule("escalate", Pattern("Ticket", "ticket", where="priority >= 3", bind={"p": "priority"}))
    def escalate(ctx):
        ticket = ctx["ticket"]
        seen.append((ticket.ref, ctx.var("p"), ticket.priority, ticket.note))

    return Engine(book, strategy=strategy), seen


def withdrawals(engine):
    return [(e.rule, e.fact_ids, e.detail["reason"]) for e in engine.audit.of_kind("withdrawn")]


def freeze_engine():
    """page_oncall fires for urgent tickets unless an active freeze exists."""
    book = RuleBook(make_schema())
    paged = []

    @book.rule(
        "page_oncall",
        Pattern("Ticket", "ticket", where="priority >= 3", bind={"ref": "ref"}),
        Pattern("Freeze", "freeze", where='team == "ops" and active == True', absent=True),
    )
    def page_oncall(ctx):
        paged.append(ctx.var("ref"))

    return Engine(book), paged


# -- retraction ------------------------------------------------------------


def test_retracted_fact_leaves_pending_and_never_fires():
    """Engine docs: "The fact leaves working memory, and with it every pending activation that uses it." """
    engine, seen = escalation_engine()
    first = engine.assert_fact("Ticket", ref="T1", priority=5)
    second = engine.assert_fact("Ticket", ref="T2", priority=4)
    engine.retract(first)
    assert [a.fact_ids for a in engine.pending()] == [(second.fact_id,)]
    assert engine.run().fired == 1
    assert [ref for ref, *_ in seen] == ["T2"]


def test_retraction_withdrawal_is_audited_with_its_reason():
    """Audit docs: "Its ``detail['reason']`` is ``rule disabled``, ``fact retracted`` (one of its facts left working memory), ``no longer matches`` (a modify made the rule stop matching its facts) or ``blocked`` (a fact now blocks one of the rule's absent patterns)." """
    engine, _ = escalation_engine()
    ticket = engine.assert_fact("Ticket", ref="T1", priority=5)
    engine.retract(ticket)
    assert withdrawals(engine) == [("escalate", (ticket.fact_id,), "fact retracted")]


def test_fact_retracted_by_a_higher_salience_rule_does_not_feed_a_join():
    """Engine docs: "The fact leaves working memory, and with it every pending activation that uses it." """
    book = RuleBook(make_schema())
    assigned = []

    @book.rule("retire_idle_agent", Pattern("Agent", "agent", where="capacity == 0"), salience=10)
    def retire_idle_agent(ctx):
        ctx.retract(ctx["agent"])

    @book.rule(
        "assign",
        Pattern("Ticket", "ticket", bind={"p": "priority"}),
        Pattern("Agent", "agent", where="capacity + 1 >= $p"),
    )
    def assign(ctx):
        assigned.append(ctx["agent"].name)

    engine = Engine(book)
    engine.assert_fact("Agent", name="idle", capacity=0)
    engine.assert_fact("Agent", name="bob", capacity=4)
    engine.assert_fact("Ticket", ref="T1", priority=1)
    engine.run()
    assert assigned == ["bob"]
    assert engine.audit.fired_rules() == ["retire_idle_agent", "assign"]


# -- modification ----------------------------------------------------------


def test_modify_that_breaks_the_condition_withdraws_and_audits():
    """Engine docs: "A modification is a change like any other: every rule that reads one of the changed fields is matched against the fact again as though it had just been asserted." Audit docs: "``no longer matches`` (a modify made the rule stop matching its facts)" """
    engine, seen = escalation_engine()
    ticket = engine.assert_fact("Ticket", ref="T1", priority=5)
    engine.modify(ticket, priority=1)
    assert engine.pending() == []
    assert withdrawals(engine) == [("escalate", (ticket.fact_id,), "no longer matches")]
    assert engine.run().fired == 0
    assert seen == []


def test_modify_that_keeps_the_condition_refreshes_the_pending_activation():
    """Engine docs: "Changes are handled as they happen, so :meth:`Engine.pending` is accurate between any two changes, not only when the next activation fires." Audit docs: "An activation that still matches after a modify is not withdrawn: it is refreshed, and a new ``activated`` entry records its new bindings" """
    engine, _ = escalation_engine()
    ticket = engine.assert_fact("Ticket", ref="T1", priority=3)
    engine.modify(ticket, priority=8)
    pending = engine.pending()
    assert len(pending) == 1
    assert pending[0].bindings["p"] == 8
    assert pending[0].fact("ticket").priority == 8
    assert withdrawals(engine) == []
    assert [e.detail["bindings"]["p"] for e in engine.audit.of_kind("activated")] == [3, 8]


def test_several_modifies_before_running_fire_once_with_the_latest_values():
    """Engine docs: "An activation fires at most once; a rule fires again for the same facts only after a change to a field it reads makes it match again, or after a fact that blocked it stops blocking." """
    engine, seen = escalation_engine()
    ticket = engine.assert_fact("Ticket", ref="T1", priority=5)
    for priority in (1, 4, 6):
        engine.modify(ticket, priority=priority)
    assert len(engine.pending()) == 1
    result = engine.run()
    assert result.fired == 1
    assert result.firings[0].bindings["p"] == 6
    assert seen == [("T1", 6, 6, "")]


def test_modified_fact_is_the_most_recent_change_under_depth():
    """Engine docs: "every rule that reads one of the changed fields is matched against the fact again as though it had just been asserted." Agenda docs: "most recent first under the ``depth`` strategy (the default), oldest first under ``breadth``" """
    engine, seen = escalation_engine("depth")
    engine.assert_fact("Ticket", ref="T1", priority=3)
    middle = engine.assert_fact("Ticket", ref="T2", priority=3)
    engine.assert_fact("Ticket", ref="T3", priority=3)
    engine.modify(middle, priority=4)
    engine.run()
    assert [ref for ref, *_ in seen] == ["T2", "T3", "T1"]


def test_modified_fact_goes_to_the_back_under_breadth():
    """Engine docs: "every rule that reads one of the changed fields is matched against the fact again as though it had just been asserted." Agenda docs: "most recent first under the ``depth`` strategy (the default), oldest first under ``breadth``" """
    engine, seen = escalation_engine("breadth")
    engine.assert_fact("Ticket", ref="T1", priority=3)
    middle = engine.assert_fact("Ticket", ref="T2", priority=3)
    engine.assert_fact("Ticket", ref="T3", priority=3)
    engine.modify(middle, priority=4)
    engine.run()
    assert [ref for ref, *_ in seen] == ["T1", "T3", "T2"]


def test_action_sees_unread_fields_as_they_are_when_it_fires():
    """RuleContext docs: "``ctx[alias]`` (or ``ctx.fact(alias)``) is the fact matched by the pattern with that alias as it stands when the rule fires, every field included" """
    engine, seen = escalation_engine()
    ticket = engine.assert_fact("Ticket", ref="T1", priority=4)
    engine.modify(ticket, note="customer called twice")
    engine.run()
    assert seen == [("T1", 4, 4, "customer called twice")]


def test_modifying_the_joined_fact_rebinds_or_withdraws_the_activation():
    """Engine docs: "A modification is a change like any other: every rule that reads one of the changed fields is matched against the fact again as though it had just been asserted." """
    book = RuleBook(make_schema())
    seen = []

    @book.rule(
        "assign",
        Pattern("Ticket", "ticket", bind={"p": "priority"}),
        Pattern("Agent", "agent", where="capacity >= $p", bind={"cap": "capacity"}),
    )
    def assign(ctx):
        seen.append((ctx["agent"].name, ctx.var("cap"), ctx["agent"].capacity))

    engine = Engine(book)
    ann = engine.assert_fact("Agent", name="ann", capacity=5)
    bob = engine.assert_fact("Agent", name="bob", capacity=6)
    engine.assert_fact("Ticket", ref="T1", priority=3)
    engine.modify(ann, capacity=9)
    engine.modify(bob, capacity=2)
    assert [a.bindings["cap"] for a in engine.pending()] == [9]
    engine.run()
    assert seen == [("ann", 9, 9)]


def test_higher_salience_modify_cascades_to_queued_rules():
    """Engine docs: "A modification is a change like any other: every rule that reads one of the changed fields is matched against the fact again as though it had just been asserted." """
    book = RuleBook(make_schema())
    paged, notified = [], []

    @book.rule("triage", Pattern("Ticket", "ticket", where='status == "new"', bind={"p": "priority"}), salience=10)
    def triage(ctx):
        ctx.modify(ctx["ticket"], status="triaged", priority=ctx.var("p") + 1)

    @book.rule("page_new", Pattern("Ticket", "ticket", where='status == "new" and priority >= 3'))
    def page_new(ctx):
        paged.append(ctx["ticket"].ref)

    @book.rule("notify", Pattern("Ticket", "ticket", where="priority >= 3", bind={"p": "priority"}))
    def notify(ctx):
        notified.append(ctx.var("p"))

    engine = Engine(book)
    engine.assert_fact("Ticket", ref="T1", priority=3)
    engine.run()
    assert paged == []
    assert notified == [4]
    assert engine.audit.fired_rules() == ["triage", "notify"]


# -- absent patterns -------------------------------------------------------


def test_asserting_a_blocker_withdraws_the_pending_activation():
    """Engine docs: "A fact that starts to block an absent pattern (it is asserted, or modified so that it passes the pattern's tests) takes the activations it blocks off the agenda." """
    engine, paged = freeze_engine()
    ticket = engine.assert_fact("Ticket", ref="T1", priority=5)
    engine.assert_fact("Freeze", team="ops")
    engine.assert_fact("Freeze", team="billing")
    assert engine.pending() == []
    assert withdrawals(engine) == [("page_oncall", (ticket.fact_id,), "blocked")]
    engine.run()
    assert paged == []


def test_modifying_a_fact_into_a_blocker_withdraws_the_activation():
    """Engine docs: "A fact that starts to block an absent pattern (it is asserted, or modified so that it passes the pattern's tests) takes the activations it blocks off the agenda." """
    engine, paged = freeze_engine()
    freeze = engine.assert_fact("Freeze", team="ops", active=False)
    engine.assert_fact("Ticket", ref="T1", priority=5)
    assert len(engine.pending()) == 1
    engine.modify(freeze, active=True)
    assert engine.pending() == []
    engine.run()
    assert paged == []


def test_retracting_the_blocker_activates_the_match_again():
    """Engine docs: "When a fact stops blocking (it is retracted, or modified so that it no longer passes the tests), the matches it was blocking, and only those, are activated again, stamped with the tick of that change, unless another live fact still blocks them." """
    engine, paged = freeze_engine()
    freeze = engine.assert_fact("Freeze", team="ops")
    engine.assert_fact("Ticket", ref="T1", priority=5)
    assert engine.pending() == []
    engine.retract(freeze)
    assert [a.describe() for a in engine.pending()] == ["page_oncall[ticket=f2]"]
    engine.run()
    assert paged == ["T1"]


def test_modifying_the_blocker_so_it_no_longer_blocks_activates_the_match():
    """Engine docs: "When a fact stops blocking (it is retracted, or modified so that it no longer passes the tests), the matches it was blocking, and only those, are activated again, stamped with the tick of that change, unless another live fact still blocks them." """
    engine, paged = freeze_engine()
    freeze = engine.assert_fact("Freeze", team="ops")
    engine.assert_fact("Ticket", ref="T1", priority=5)
    engine.assert_fact("Ticket", ref="T2", priority=1)
    engine.modify(freeze, active=False)
    engine.run()
    assert paged == ["T1"]


def test_another_live_blocker_keeps_the_match_off_the_agenda():
    """Engine docs: "When a fact stops blocking (it is retracted, or modified so that it no longer passes the tests), the matches it was blocking, and only those, are activated again, stamped with the tick of that change, unless another live fact still blocks them." """
    engine, paged = freeze_engine()
    first = engine.assert_fact("Freeze", team="ops")
    second = engine.assert_fact("Freeze", team="ops")
    engine.assert_fact("Ticket", ref="T1", priority=5)
    engine.retract(first)
    assert engine.pending() == []
    assert engine.run().fired == 0
    engine.modify(second, active=False)
    engine.run()
    assert paged == ["T1"]


def test_unblocking_activates_only_the_matches_that_fact_was_blocking():
    """Engine docs: "When a fact stops blocking (it is retracted, or modified so that it no longer passes the tests), the matches it was blocking, and only those, are activated again, stamped with the tick of that change, unless another live fact still blocks them." """
    book = RuleBook(make_schema())
    paged = []

    @book.rule(
        "page_team",
        Pattern("Agent", "agent", bind={"team": "name"}),
        Pattern("Ticket", "ticket", where="priority >= 3", bind={"ref": "ref"}),
        Pattern("Freeze", "freeze", where="team == $team and active == True", absent=True),
    )
    def page_team(ctx):
        paged.append((ctx.var("team"), ctx.var("ref")))

    engine = Engine(book)
    engine.assert_fact("Agent", name="ops", capacity=1)
    engine.assert_fact("Agent", name="db", capacity=1)
    engine.assert_fact("Ticket", ref="T1", priority=5)
    engine.run()
    assert sorted(paged) == [("db", "T1"), ("ops", "T1")]
    frozen = engine.assert_fact("Freeze", team="db")
    engine.retract(engine.assert_fact("Freeze", team="sales"))
    assert engine.pending() == []
    engine.retract(frozen)
    assert [a.bindings["team"] for a in engine.pending()] == ["db"]
    engine.run()
    assert sorted(paged) == [("db", "T1"), ("db", "T1"), ("ops", "T1")]


def test_reactivated_match_is_stamped_with_the_tick_of_the_unblocking_change():
    """Engine docs: "When a fact stops blocking (it is retracted, or modified so that it no longer passes the tests), the matches it was blocking, and only those, are activated again, stamped with the tick of that change, unless another live fact still blocks them." """
    book = RuleBook(make_schema())
    order = []

    @book.rule(
        "page_oncall",
        Pattern("Ticket", "ticket", where="priority >= 3", bind={"ref": "ref"}),
        Pattern("Freeze", "freeze", where='team == "ops" and active == True', absent=True),
    )
    def page_oncall(ctx):
        order.append(("page", ctx.var("ref")))

    @book.rule("log_agent", Pattern("Agent", "agent"))
    def log_agent(ctx):
        order.append(("agent", ctx["agent"].name))

    engine = Engine(book)
    freeze = engine.assert_fact("Freeze", team="ops")
    engine.assert_fact("Ticket", ref="T1", priority=5)
    engine.assert_fact("Agent", name="ann", capacity=1)
    engine.modify(freeze, active=False)
    stamps = {a.rule_name: a.stamp for a in engine.pending()}
    assert stamps["page_oncall"] == engine.memory.tick
    engine.run()
    assert order == [("page", "T1"), ("agent", "ann")]
