"""Settlement runs: amounts, fees, the cutoff, the order and the checks (docs/settlement.md)."""

import pytest

from src.engine import Database

RUN_DATE = "2024-03-01"
MORNING = "2024-03-01T09:00:00+00:00"


def ledger(rows):
    db = Database()
    with db.begin() as txn:
        for key, row in rows.items():
            txn.put(key, row)
    return db


def account(balance, currency="EUR", **extra):
    row = {"currency": currency, "balance": balance}
    row.update(extra)
    return row


def ins(id, payer, payee, amount, currency="EUR", at=MORNING, priority=0):
    from src.settlement import Instruction

    return Instruction(id=id, payer=payer, payee=payee, amount=amount, currency=currency, submitted_at=at, priority=priority)


def run(db, instructions, run_id="r1", business_date=RUN_DATE, **kwargs):
    from src.settlement import settle

    return settle(db, run_id, business_date, instructions, **kwargs)


def rows(db, prefix="acct/"):
    with db.snapshot() as snap:
        return dict(snap.scan(prefix=prefix))


def balances(db):
    return {key: row["balance"] for key, row in rows(db).items()}


def test_amounts_are_rounded_half_to_even_before_they_are_totalled():
    """Docs: "The amount is first rounded to the minor unit of the instruction's currency, rounding half to even (`"0.125"` EUR is 0.12, `"0.135"` EUR is 0.14); every later step (fees, funds, totals) uses the rounded amount." and "the sums written as decimal strings with exactly the currency's number of decimal places" """
    db = ledger({"acct/a": account(10000), "acct/b": account(0)})
    report = run(db, [
        ins("t1", "acct/a", "acct/b", "0.125"),
        ins("t2", "acct/a", "acct/b", "0.135"),
        ins("t3", "acct/a", "acct/b", "10.005"),
        ins("t4", "acct/a", "acct/b", "2.5"),
    ])
    assert report.settled == ("t1", "t2", "t3", "t4")
    assert balances(db) == {"acct/a": 8724, "acct/b": 1276}
    assert report.totals == {"EUR": {"count": 4, "amount": "12.76", "fees": "0.00"}}


def test_fees_round_halves_up_on_the_rounded_amount():
    """Docs: "The fee of a settled instruction is `bps` basis points (hundredths of a percent) of its rounded amount, rounded to the minor unit with halves rounded up" and "The payer pays the fee on top of the amount." """
    from src.settlement import FeeSchedule

    db = ledger({"acct/a": account(100000), "acct/b": account(0)})
    report = run(db, [
        ins("f1", "acct/a", "acct/b", "2.00"),
        ins("f2", "acct/a", "acct/b", "6.00"),
        ins("f3", "acct/a", "acct/b", "10.00"),
        ins("f4", "acct/a", "acct/b", "1.00"),
        ins("f5", "acct/a", "acct/b", "14.005"),
        ins("f6", "acct/a", "acct/b", "1.995"),
    ], fees=FeeSchedule(bps=25))
    # fees: 0.5 -> 1, 1.5 -> 2, 2.5 -> 3, 0.25 -> 0, 1400 * 25 / 10000 = 3.5 -> 4, 200 * 25 / 10000 = 0.5 -> 1
    assert report.totals == {"EUR": {"count": 6, "amount": "35.00", "fees": "0.11"}}
    assert balances(db) == {"acct/a": 100000 - 3500 - 11, "acct/b": 3500, "acct/fees/EUR": 11}


def test_minimum_fee_and_the_fee_account_of_each_currency():
    """Docs: "if that is less than the schedule's minimum for the currency (in minor units, 0 when the currency is not listed), the fee is the minimum." and "If it does not exist, the run creates it as `{"currency": <CURRENCY>, "balance": <fee>}`. A fee of zero changes no account and creates none." """
    from src.settlement import FeeSchedule

    db = ledger({
        "acct/a": account(50000), "acct/b": account(0),
        "acct/u": account(50000, "USD"), "acct/v": account(0, "USD"),
    })
    report = run(db, [
        ins("e1", "acct/a", "acct/b", "100.00"),
        ins("e2", "acct/a", "acct/b", "300.00"),
        ins("u1", "acct/u", "acct/v", "1.00", "USD"),
    ], fees=FeeSchedule(bps=25, minimum={"EUR": 50}))
    assert report.totals == {
        "EUR": {"count": 2, "amount": "400.00", "fees": "1.25"},
        "USD": {"count": 1, "amount": "1.00", "fees": "0.00"},
    }
    found = rows(db)
    assert found["acct/fees/EUR"] == {"currency": "EUR", "balance": 125}
    assert "acct/fees/USD" not in found
    assert found["acct/a"]["balance"] == 50000 - 10000 - 50 - 30000 - 75
    assert found["acct/u"]["balance"] == 49900


def test_settlement_rewrites_only_the_balance_of_each_row():
    """Docs: "Settlement rewrites only `balance`: every other field of the row is kept as it was." and "Fees are credited to the fee account of the currency, `acct/fees/<CURRENCY>`" """
    from src.settlement import FeeSchedule

    db = ledger({
        "acct/a": account(5000, overdraft=1000, branch="north", closed=False),
        "acct/b": account(0, branch="south", owner={"name": "B"}),
        "acct/fees/EUR": account(7, branch="hq"),
    })
    run(db, [ins("x", "acct/a", "acct/b", "55.00")], fees=FeeSchedule(minimum={"EUR": 25}))
    assert rows(db) == {
        "acct/a": {"currency": "EUR", "balance": 5000 - 5500 - 25, "overdraft": 1000, "branch": "north", "closed": False},
        "acct/b": {"currency": "EUR", "balance": 5500, "branch": "south", "owner": {"name": "B"}},
        "acct/fees/EUR": {"currency": "EUR", "balance": 32, "branch": "hq"},
    }


def test_currencies_without_cents_and_with_three_decimals():
    """Docs: "The supported currencies and their minor units are EUR, USD and GBP (2 decimal places), JPY (0 decimal places) and KWD (3 decimal places)." and "(`"1250.50"` EUR, `"300"` JPY, `"0.250"` KWD)" """
    db = ledger({
        "acct/j1": account(10000, "JPY"), "acct/j2": account(0, "JPY"),
        "acct/k1": account(10000, "KWD"), "acct/k2": account(0, "KWD"),
    })
    report = run(db, [
        ins("j-a", "acct/j1", "acct/j2", "1500.5", "JPY"),
        ins("j-b", "acct/j1", "acct/j2", "2.5", "JPY"),
        ins("k-a", "acct/k1", "acct/k2", "1.0005", "KWD"),
        ins("k-b", "acct/k1", "acct/k2", "0.0015", "KWD"),
    ])
    assert report.totals == {
        "JPY": {"count": 2, "amount": "1502", "fees": "0"},
        "KWD": {"count": 2, "amount": "1.002", "fees": "0.000"},
    }
    assert balances(db) == {"acct/j1": 8498, "acct/j2": 1502, "acct/k1": 8998, "acct/k2": 1002}


def test_malformed_amounts_and_amounts_that_round_to_zero_are_invalid():
    """Docs: "one or more digits, optionally followed by a point and one or more digits" and "Signs, exponents, spaces and thousands separators make the amount invalid." and "An amount that is zero after rounding is invalid." """
    db = ledger({"acct/a": account(10000), "acct/b": account(0), "acct/j": account(100, "JPY"), "acct/k": account(0, "JPY")})
    report = run(db, [
        ins("a1", "acct/a", "acct/b", "0.004"),
        ins("a2", "acct/a", "acct/b", "0.005"),
        ins("a3", "acct/a", "acct/b", "0.015"),
        ins("a4", "acct/a", "acct/b", "-5"),
        ins("a5", "acct/a", "acct/b", "1e3"),
        ins("a6", "acct/a", "acct/b", "1,50"),
        ins("a7", "acct/a", "acct/b", " 5"),
        ins("a8", "acct/a", "acct/b", "5."),
        ins("a9", "acct/a", "acct/b", ".5"),
        ins("b1", "acct/j", "acct/k", "0.5", "JPY"),
        ins("b2", "acct/j", "acct/k", "1.5", "JPY"),
        ins("b3", "acct/a", "acct/b", "007.50"),
    ])
    assert report.settled == ("a3", "b2", "b3")
    assert report.rejected == tuple((id, "invalid_amount") for id in ("a1", "a2", "a4", "a5", "a6", "a7", "a8", "a9", "b1"))
    assert balances(db) == {"acct/a": 10000 - 2 - 750, "acct/b": 752, "acct/j": 98, "acct/k": 2}


def test_the_cutoff_is_exclusive_and_taken_at_the_runs_offset():
    """Docs: "The cutoff of the run is the time of day `cutoff` (`"HH:MM"`, 17:00 by default) on the business date, at the run's `utc_offset`" and "An instruction submitted before the cutoff takes part in the run, however many days earlier it was submitted; one submitted at the cutoff or later is deferred." and "Instants are compared as instants, whatever offset they are written with." """
    db = ledger({"acct/a": account(100000), "acct/b": account(0)})
    report = run(db, [
        ins("c1", "acct/a", "acct/b", "1", at="2024-03-01T15:59:59Z"),
        ins("c2", "acct/a", "acct/b", "1", at="2024-03-01T16:00:00Z"),
        ins("c3", "acct/a", "acct/b", "1", at="2024-03-01T17:00:00+01:00"),
        ins("c4", "acct/a", "acct/b", "1", at="2024-03-01T16:59:59.999999+01:00"),
        ins("c5", "acct/a", "acct/b", "1", at="2024-03-01T11:00:00-05:00"),
        ins("c6", "acct/a", "acct/b", "1", at="2024-02-27T18:00:00+01:00"),
        ins("c7", "acct/a", "acct/b", "1", at="2024-03-02T08:00:00+01:00"),
    ], utc_offset="+01:00")
    assert report.settled == ("c6", "c1", "c4")
    assert report.deferred == ("c2", "c3", "c5", "c7")
    assert report.rejected == ()
    assert balances(db)["acct/b"] == 300


def test_a_later_cutoff_and_a_western_offset():
    """Docs: "The cutoff of the run is the time of day `cutoff` (`"HH:MM"`, 17:00 by default) on the business date, at the run's `utc_offset` (`"+HH:MM"` or `"-HH:MM"`, UTC by default)." and "one submitted at the cutoff or later is deferred" """
    db = ledger({"acct/a": account(100000), "acct/b": account(0)})
    report = run(db, [
        ins("w1", "acct/a", "acct/b", "1", at="2024-03-02T02:29:59Z"),
        ins("w2", "acct/a", "acct/b", "1", at="2024-03-01T21:30:00-05:00"),
        ins("w3", "acct/a", "acct/b", "1", at="2024-03-01T23:00:00+00:00"),
    ], cutoff="21:30", utc_offset="-05:00")
    assert report.settled == ("w3", "w1")
    assert report.deferred == ("w2",)
    default = run(ledger({"acct/a": account(100000), "acct/b": account(0)}), [
        ins("u1", "acct/a", "acct/b", "1", at="2024-03-01T16:59:59+00:00"),
        ins("u2", "acct/a", "acct/b", "1", at="2024-03-01T18:00:00+01:00"),
    ])
    assert default.settled == ("u1",)
    assert default.deferred == ("u2",)


def test_application_order_decides_which_debits_are_funded():
    """Docs: "A run applies its instructions one at a time, in this order: higher `priority` first; among equal priorities, earlier `submitted_at` first; among equal instants, by `id` (plain string order)." and "Instants are compared as instants, whatever offset they are written with." """
    db = ledger({"acct/p": account(10000), "acct/q": account(0)})
    report = run(db, [
        ins("x", "acct/p", "acct/q", "0.01", at="2024-03-01T11:00:00Z"),
        ins("v", "acct/p", "acct/q", "0.01", at="2024-03-01T10:00:00+01:00"),
        ins("u", "acct/p", "acct/q", "10.00", at="2024-03-01T09:00:00Z"),
        ins("w", "acct/p", "acct/q", "30.00", at="2024-03-01T10:30:00+02:00"),
        ins("y", "acct/p", "acct/q", "60.00", at="2024-03-01T12:00:00Z", priority=1),
    ])
    assert report.settled == ("y", "w", "u")
    assert report.rejected == (("v", "insufficient_funds"), ("x", "insufficient_funds"))
    assert balances(db) == {"acct/p": 0, "acct/q": 10000}


def test_invalid_times_are_rejected_first_and_come_last_within_their_priority():
    """Docs: "Instructions whose `submitted_at` is an invalid time come after every other instruction of the same priority, among themselves by `id`." and "A `submitted_at` that cannot be read, or that has no offset, is an invalid time." """
    db = ledger({"acct/p": account(100), "acct/q": account(0)})
    report = run(db, [
        ins("c", "acct/p", "acct/q", "abc", at="2024-03-01T09:00:00"),
        ins("b", "acct/p", "acct/q", "1.00", at="yesterday"),
        ins("a", "acct/p", "acct/q", "5.00", at="2024-03-01T10:00:00Z"),
        ins("z", "acct/p", "acct/q", "1.00", at="2024-03-01 08:00", priority=1),
        ins("m", "acct/p", "acct/q", "1.00", at="2024-03-01T23:00:00Z", priority=1),
        ins("n", "acct/p", "acct/q", "1.00", at="2024-03-01T08:00:00Z"),
    ])
    assert report.settled == ("n",)
    assert report.deferred == ("m",)
    assert report.rejected == (
        ("z", "invalid_time"),
        ("a", "insufficient_funds"),
        ("b", "invalid_time"),
        ("c", "invalid_time"),
    )


def test_credits_earlier_in_the_run_pay_for_later_debits_exactly():
    """Docs: "Every instruction sees the balances left by the instructions before it in this order, in the same run: money credited to an account earlier in the run can pay for a later debit." and "Reaching exactly minus the overdraft is allowed." """
    from src.settlement import FeeSchedule

    fees = FeeSchedule(minimum={"EUR": 10})
    for chunk_size in (1, 100):
        db = ledger({"acct/a": account(0), "acct/b": account(5010), "acct/c": account(0)})
        report = run(db, [
            ins("second", "acct/a", "acct/c", "49.90", at="2024-03-01T10:00:00Z"),
            ins("first", "acct/b", "acct/a", "50.00", at="2024-03-01T09:00:00Z"),
            ins("third", "acct/a", "acct/c", "0.01", at="2024-03-01T11:00:00Z"),
        ], fees=fees, chunk_size=chunk_size)
        assert report.settled == ("first", "second")
        assert report.rejected == (("third", "insufficient_funds"),)
        assert balances(db) == {"acct/a": 0, "acct/b": 0, "acct/c": 4990, "acct/fees/EUR": 20}


def test_overdraft_limits_count_the_fee_and_a_missing_overdraft_is_zero():
    """Docs: "`insufficient_funds`: after paying the amount and the fee, the payer's balance would be below minus its overdraft. Reaching exactly minus the overdraft is allowed." and "a row without `overdraft` has an overdraft of 0" """
    from src.settlement import FeeSchedule

    db = ledger({
        "acct/o1": account(0, overdraft=1000),
        "acct/o2": account(0, overdraft=1000),
        "acct/o3": account(0),
        "acct/o4": account(1),
        "acct/z": account(0),
    })
    report = run(db, [
        ins("o1", "acct/o1", "acct/z", "9.90"),
        ins("o2", "acct/o2", "acct/z", "9.91"),
        ins("o3", "acct/o3", "acct/z", "0.01"),
        ins("o4", "acct/o4", "acct/z", "0.01"),
    ], fees=FeeSchedule(bps=100))
    assert report.settled == ("o1", "o4")
    assert report.rejected == (("o2", "insufficient_funds"), ("o3", "insufficient_funds"))
    assert balances(db) == {"acct/o1": -1000, "acct/o2": 0, "acct/o3": 0, "acct/o4": 0, "acct/z": 991, "acct/fees/EUR": 10}


def test_the_first_check_that_applies_decides():
    """Docs: "Each instruction is checked in turn; the first check that applies decides its outcome, and only an instruction that passes every check is settled" """
    db = ledger({
        "acct/a": account(0),
        "acct/b": account(0),
        "acct/shut": account(100000, closed=True),
        "acct/usd-shut": account(0, "USD", closed=True),
        "acct/usd": account(0, "USD"),
        "wallet/1": account(0),
    })
    report = run(db, [
        ins("i01", "acct/a", "acct/b", "abc", "CHF"),
        ins("i02", "acct/x", "acct/x", "1.2.3"),
        ins("i03", "acct/x", "acct/x", "1.00"),
        ins("i04", "acct/shut", "acct/nope", "1.00"),
        ins("i05", "acct/a", "acct/usd-shut", "1.00"),
        ins("i06", "acct/a", "acct/usd", "1.00"),
        ins("i07", "acct/a", "wallet/1", "1.00"),
        ins("i08", "acct/a", "acct/b", "1.00", "CHF", at="2024-03-01T17:00:00Z"),
        ins("i09", "acct/a", "acct/b", "0", "CHF", at="2024-03-01T17:00"),
        ins("i10", "acct/a", "acct/shut", "1.00"),
    ])
    assert report.settled == ()
    assert report.deferred == ("i08",)
    assert report.rejected == (
        ("i01", "unsupported_currency"),
        ("i02", "invalid_amount"),
        ("i03", "same_account"),
        ("i04", "unknown_account"),
        ("i05", "account_closed"),
        ("i06", "currency_mismatch"),
        ("i07", "unknown_account"),
        ("i10", "account_closed"),
        ("i09", "invalid_time"),
    )


def test_duplicates_within_a_run_and_across_runs():
    """Docs: "`duplicate`: an instruction with the same `id` was already settled, by an earlier run or earlier in this run." and "leaves a settlement marker `settled/<id>` holding `{"run": <run id>}`. Only settled instructions leave a marker, so an instruction that was rejected or deferred may be given again, to this run or a later one, and is then checked afresh." """
    db = ledger({"acct/a": account(1000), "acct/b": account(0)})
    first = run(db, [ins("d1", "acct/a", "acct/b", "1.00")], run_id="day1")
    assert first.settled == ("d1",)
    second = run(db, [
        ins("d1", "acct/a", "acct/b", "2.00", at="2024-03-01T18:00:00Z"),
        ins("d2", "acct/a", "acct/b", "1.00", at="2024-03-01T09:00:00Z"),
        ins("d2", "acct/a", "acct/b", "1.00", at="2024-03-01T09:30:00Z"),
        ins("d3", "acct/a", "acct/b", "50.00", at="2024-03-01T08:00:00Z"),
        ins("d3", "acct/a", "acct/b", "3.00", at="2024-03-01T08:30:00Z"),
    ], run_id="day2")
    assert second.settled == ("d3", "d2")
    assert second.rejected == (("d3", "insufficient_funds"), ("d2", "duplicate"), ("d1", "duplicate"))
    assert second.deferred == ()
    assert rows(db, "settled/") == {"settled/d1": {"run": "day1"}, "settled/d2": {"run": "day2"}, "settled/d3": {"run": "day2"}}
    assert balances(db) == {"acct/a": 500, "acct/b": 500}


def test_rejected_and_deferred_instructions_settle_in_a_later_run():
    """Docs: "A deferred instruction is neither settled nor rejected: it is listed in the report's `deferred` and may be given to a later run." and "Only settled instructions leave a marker, so an instruction that was rejected or deferred may be given again, to this run or a later one, and is then checked afresh." """
    db = ledger({"acct/a": account(100), "acct/b": account(0), "acct/c": account(10000)})
    late = ins("late", "acct/c", "acct/b", "20.00", at="2024-03-01T17:30:00Z")
    poor = ins("poor", "acct/a", "acct/b", "5.00", at="2024-03-01T10:00:00Z")
    first = run(db, [late, poor], run_id="day1")
    assert (first.settled, first.rejected, first.deferred) == ((), (("poor", "insufficient_funds"),), ("late",))
    assert rows(db, "settled/") == {}
    with db.begin() as txn:
        txn.put("acct/a", account(600))
    second = run(db, [poor, late], run_id="day2", business_date="2024-03-02")
    assert second.settled == ("poor", "late")
    assert balances(db) == {"acct/a": 100, "acct/b": 2500, "acct/c": 8000}
