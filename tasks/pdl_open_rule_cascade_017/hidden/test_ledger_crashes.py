from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

import pytest

from src.orders import Batch, OrderDesk
from src.orders.files import Crash, MemoryFiles

D = Decimal
NAME = "captures.json"
LOCAL = timezone(timedelta(hours=-5))
TUESDAY = date(2024, 4, 2)


# -- ledger states --------------------------------------------------------------


def make_entry(oid, amounts, status="pending", parts=None, day=2, cross_border=False):
    """A LedgerEntry; ``parts`` gives (status, attempts, fee, reference) per part."""
    from src.orders.settlement import CapturePart, LedgerEntry

    amounts = [D(a) for a in amounts]
    parts = parts or [("pending", 0, None, None)] * len(amounts)
    return LedgerEntry(
        order_id=oid,
        customer_id="C-" + oid[-1],
        amount=sum(amounts, D("0.00")),
        placed_at=datetime(2024, 4, day, 9, 30, tzinfo=LOCAL),
        settlement_date=date(2024, 4, day),
        cross_border=cross_border,
        status=status,
        parts=[
            CapturePart(n, a, s, att, None if fee is None else D(fee), ref)
            for n, (a, (s, att, fee, ref)) in enumerate(zip(amounts, parts), start=1)
        ],
    )


def state(ledger):
    """Everything a ledger holds, entries in the ledger's order."""
    return [
        (
            e.order_id, e.customer_id, e.amount, e.placed_at, e.settlement_date, e.cross_border, e.status,
            tuple((p.number, p.amount, p.status, p.attempts, p.fee, p.reference) for p in e.parts),
        )
        for e in ledger.entries()
    ]


def changes():
    """Fourteen changes to a ledger: ("add" | "update", entry)."""
    ok = lambda fee, ref: ("captured", 0, fee, ref)  # noqa: E731
    pend = ("pending", 0, None, None)
    return [
        ("add", make_entry("ORD-A", ["1333.34"])),
        ("add", make_entry("ORD-B", ["1333.34", "1333.33"], cross_border=True)),
        ("update", make_entry("ORD-A", ["1333.34"], parts=[("pending", 1, None, None)])),
        ("add", make_entry("ORD-C", ["87.65"], day=3)),
        ("update", make_entry("ORD-B", ["1333.34", "1333.33"], cross_border=True,
                              parts=[ok("52.30", "GW-0001"), pend])),
        ("update", make_entry("ORD-A", ["1333.34"], "captured", parts=[("captured", 1, "38.97", "GW-0002")])),
        ("update", make_entry("ORD-B", ["1333.34", "1333.33"], "captured", cross_border=True,
                              parts=[ok("52.30", "GW-0001"), ok("52.29", "GW-0003")])),
        ("add", make_entry("ORD-D", ["1500.00", "1500.00", "1500.00"], day=3)),
        ("update", make_entry("ORD-D", ["1500.00", "1500.00", "1500.00"], day=3,
                              parts=[ok("43.80", "GW-0004"), pend, pend])),
        ("update", make_entry("ORD-D", ["1500.00", "1500.00", "1500.00"], "declined", day=3,
                              parts=[ok("43.80", "GW-0004"), ("declined", 0, None, None),
                                     ("cancelled", 0, None, None)])),
        ("add", make_entry("ORD-E", ["0.30"], "waived", parts=[], day=4)),
        ("update", make_entry("ORD-C", ["87.65"], "captured", day=3, parts=[ok("2.84", "GW-0005")])),
        ("add", make_entry("ORD-F", ["19.99"], day=4)),
        ("update", make_entry("ORD-F", ["19.99"], "failed", day=4, parts=[("failed", 3, None, None)])),
    ]


def expected_states():
    """The state after each prefix of changes() (index = number of changes made)."""
    from src.orders.settlement import Ledger

    plain = Ledger()
    states = [state(plain)]
    for kind, entry in changes():
        getattr(plain, kind)(entry)
        states.append(state(plain))
    return states


def open_ledger(files, compact_every=8):
    from src.orders.settlement import Ledger

    return Ledger(NAME, files=files, compact_every=compact_every)


def apply(ledger, start=0, stop=None):
    """Make changes()[start:stop]; the number of changes that returned."""
    made = start
    for kind, entry in changes()[start:stop]:
        getattr(ledger, kind)(entry)
        made += 1
    return made


def total_ops(compact_every):
    files = MemoryFiles()
    apply(open_ledger(files, compact_every))
    return files.ops, list(files.log)


def crash_points(log, keeps=("zero", "one", "half", "all-but-one")):
    """(operation number, bytes kept) for every operation, with torn variants of writes and appends."""
    points = []
    for number, (kind, _name, length) in enumerate(log, start=1):
        points.append((number, 0))
        if kind in ("write", "append") and length > 1:
            torn = {"one": 1, "half": length // 2, "all-but-one": length - 1}
            points.extend((number, torn[k]) for k in keeps if k != "zero")
    return sorted(set(points))


def crash_run(compact_every, op, keep):
    """Make the changes with a crash at (op, keep); the files left and the changes that returned."""
    files = MemoryFiles()
    ledger = open_ledger(files, compact_every)
    files.crash_at(op, keep)
    made = 0
    try:
        made = apply(ledger)
    except Crash:
        made = None
    if made is None:
        made = count_returned(compact_every, op, keep)
    return files.restart(), made


def count_returned(compact_every, op, keep):
    files = MemoryFiles()
    ledger = open_ledger(files, compact_every)
    files.crash_at(op, keep)
    made = 0
    for kind, entry in changes():
        try:
            getattr(ledger, kind)(entry)
        except Crash:
            return made
        made += 1
    return made


def check_recovered(ledger, made, states, where):
    got = state(ledger)
    allowed = [states[made]] + ([states[made + 1]] if made + 1 < len(states) else [])
    assert got in allowed, f"{where}: {made} changes made, ledger holds {[e[0] + ':' + e[6] for e in got]}"
    return made + 1 if got != states[made] else made


def finish_and_reopen(files, done, compact_every, states, where):
    """Make the remaining changes on the opened files, then open them once more."""
    ledger = open_ledger(files, compact_every)
    apply(ledger, done)
    assert state(ledger) == states[-1], where
    again = open_ledger(files.restart(), compact_every)
    assert state(again) == states[-1], f"{where}: changes made after the crash were lost"


# -- the journal and compaction ------------------------------------------------


def test_each_change_is_one_append_to_the_journal_until_the_ledger_compacts():
    """Settlement docs: "Recording a change appends exactly one record to the journal, with a single `append`, and makes no other file operation unless the ledger compacts." Settlement docs: "A change whose record leaves `compact_every` [8] records in the journal compacts the ledger before the call returns: the ledger writes a new snapshot holding all its entries and empties the journal." """
    for compact_every in (8, 3):
        files = MemoryFiles()
        ledger = open_ledger(files, compact_every)
        journal = set()
        for number, (kind, entry) in enumerate(changes(), start=1):
            before = files.ops
            getattr(ledger, kind)(entry)
            made = files.log[before:]
            if number % compact_every:
                assert [k for k, _, _ in made] == ["append"], (compact_every, number, made)
                journal.add(made[0][1])
            else:
                assert len(made) > 1 and made[0][0] == "append", (compact_every, number, made)
        assert len(journal) == 1

    # a reopened ledger counts the records its journal already holds
    files = MemoryFiles()
    apply(open_ledger(files), 0, 5)
    files = files.restart()
    ledger = open_ledger(files)
    # (unless opening compacted it: then its journal starts empty)
    compacting = (8,) if files.ops == 0 else (13,)
    for number, (kind, entry) in enumerate(changes()[5:], start=6):
        before = files.ops
        getattr(ledger, kind)(entry)
        kinds = [k for k, _, _ in files.log[before:]]
        assert (kinds == ["append"]) == (number not in compacting), (number, kinds)


def test_a_reopened_ledger_holds_every_change_with_its_exact_amounts_in_the_order_entries_were_added():
    """Settlement docs: "After a crash at any point, a `Ledger` opened on the same files holds every change that was made before the crash and, of the change that was being made when it crashed, either all of it or nothing of it." Settlement docs: "Its entries are in the order they were added." Settlement docs: "All amounts in the ledger and in the report are `decimal.Decimal` values in the storefront's currency, to the cent." """
    states = expected_states()
    for compact_every in (8, 5, 1):
        files = MemoryFiles()
        ledger = open_ledger(files, compact_every)
        for made, (kind, entry) in enumerate(changes(), start=1):
            getattr(ledger, kind)(entry)
            reopened = open_ledger(files.restart(), compact_every)
            assert state(reopened) == states[made], (compact_every, made)
            assert all(str(p.amount) == f"{p.amount:.2f}" for e in reopened.entries() for p in e.parts)


# -- crashes at every file operation ---------------------------------------------


def test_a_crash_at_any_file_operation_keeps_every_change_made_before_it():
    """Settlement docs: "After a crash at any point, a `Ledger` opened on the same files holds every change that was made before the crash and, of the change that was being made when it crashed, either all of it or nothing of it." """
    states = expected_states()
    for compact_every in (4, 8):
        ops, log = total_ops(compact_every)
        for op in range(1, ops + 1):
            files, made = crash_run(compact_every, op, 0)
            check_recovered(open_ledger(files, compact_every), made, states, f"every {compact_every}, crash at {op}")


def test_a_record_cut_short_counts_for_nothing_and_the_changes_after_it_are_kept():
    """Settlement docs: "After a crash at any point, a `Ledger` opened on the same files holds every change that was made before the crash and, of the change that was being made when it crashed, either all of it or nothing of it." Settlement docs: "Opening a ledger repairs whatever a crash left in its files, so that the changes made after it is opened are kept like any others." """
    states = expected_states()
    ops, log = total_ops(8)
    for op, keep in crash_points(log):
        files, made = crash_run(8, op, keep)
        where = f"crash at {op} keeping {keep} bytes"
        done = check_recovered(open_ledger(files, 8), made, states, where)
        finish_and_reopen(files.restart(), done, 8, states, where)


def test_a_crash_while_compacting_loses_nothing_and_later_compactions_still_work():
    """Settlement docs: "A change whose record leaves `compact_every` [8] records in the journal compacts the ledger before the call returns: the ledger writes a new snapshot holding all its entries and empties the journal." Settlement docs: "After a crash at any point, a `Ledger` opened on the same files holds every change that was made before the crash and, of the change that was being made when it crashed, either all of it or nothing of it." Settlement docs: "Opening a ledger repairs whatever a crash left in its files, so that the changes made after it is opened are kept like any others." """
    states = expected_states()
    for compact_every in (3, 6):
        ops, log = total_ops(compact_every)
        probe = MemoryFiles()
        ledger = open_ledger(probe, compact_every)
        apply(ledger, 0, compact_every - 1)
        first = probe.ops + 1  # the operations of change number compact_every, which compacts
        apply(ledger, compact_every - 1, compact_every)
        last = probe.ops
        assert last >= first
        points = [(op, keep) for op, keep in crash_points(log) if first <= op <= last]
        for op, keep in points:
            files, made = crash_run(compact_every, op, keep)
            where = f"every {compact_every}: crash at {op} keeping {keep} bytes"
            assert made == compact_every - 1, where
            done = check_recovered(open_ledger(files, compact_every), made, states, where)
            finish_and_reopen(files.restart(), done, compact_every, states, where)


def test_a_crash_while_a_ledger_is_opened_loses_nothing_and_its_files_open_again():
    """Settlement docs: "A crash while a ledger is being opened loses nothing: its files can be opened again, any number of times, with the same guarantee." Settlement docs: "Opening a ledger repairs whatever a crash left in its files, so that the changes made after it is opened are kept like any others." """
    states = expected_states()
    for compact_every in (3, 8):
        ops, log = total_ops(compact_every)
        for op, keep in crash_points(log, keeps=("zero", "half", "all-but-one")):
            left, made = crash_run(compact_every, op, keep)
            probe = MemoryFiles(left.contents())
            open_ledger(probe, compact_every)
            for j in range(1, probe.ops + 1):
                length = probe.log[j - 1][2]
                for keep2 in sorted({0, 1, length // 2, max(length - 1, 0)}):
                    where = f"every {compact_every}: crash at {op}/{keep}, then at {j}/{keep2} while opening"
                    files = MemoryFiles(left.contents())
                    files.crash_at(j, keep2)
                    with pytest.raises(Crash):
                        open_ledger(files, compact_every)
                    files = files.restart()
                    # and once more, at the first operation of the next opening
                    again = MemoryFiles(files.contents())
                    again.crash_at(1)
                    try:
                        open_ledger(again, compact_every)
                    except Crash:
                        files = again.restart()
                    done = check_recovered(open_ledger(MemoryFiles(files.contents()), compact_every), made, states, where)
                    finish_and_reopen(files, done, compact_every, states, where)
            where = f"every {compact_every}: crash at {op}/{keep}"
            done = check_recovered(open_ledger(MemoryFiles(left.contents()), compact_every), made, states, where)
            finish_and_reopen(MemoryFiles(left.contents()), done, compact_every, states, where)


# -- settling again after a crash ------------------------------------------------


def at(day, hour, minute=0):
    return datetime(2024, 4, day, hour, minute, tzinfo=LOCAL)


SCRIPT = {"ORD-D": ["declined"] * 20, "ORD-F/2": ["declined"] * 20}


def nightly_run():
    customers = [{"id": "C-1", "credit_limit": 20000.0}]
    orders = [
        {"id": "ORD-A", "customer_id": "C-1", "subtotal": 100.0, "placed_at": at(2, 9)},
        {"id": "ORD-B", "customer_id": "C-1", "subtotal": 2500.0, "placed_at": at(2, 10)},
        {"id": "ORD-C", "customer_id": "C-1", "subtotal": 3000.0, "country": "DE", "placed_at": at(2, 11)},
        {"id": "ORD-D", "customer_id": "C-1", "subtotal": 900.0, "placed_at": at(2, 12)},
        {"id": "ORD-E", "customer_id": "C-1", "subtotal": 0.3, "placed_at": at(2, 13)},
        {"id": "ORD-F", "customer_id": "C-1", "subtotal": 4500.0, "placed_at": at(2, 14)},
        {"id": "ORD-G", "customer_id": "C-1", "subtotal": 1234.57, "placed_at": at(2, 18)},
    ]
    return OrderDesk().process(Batch(TUESDAY, customers=customers, orders=orders))


RUN = None


def the_run():
    global RUN
    if RUN is None:
        RUN = nightly_run()
    return RUN


def settle_on(files, gateway, compact_every):
    from src.orders.settlement import SettlementPolicy, settle

    ledger = open_ledger(files, compact_every)
    return ledger, settle(the_run(), gateway, ledger, SettlementPolicy())


def clean_settlement(compact_every, script=SCRIPT):
    from src.orders.gateway import ScriptedGateway

    files = MemoryFiles()
    gateway = ScriptedGateway(dict(script))
    ledger, report = settle_on(files, gateway, compact_every)
    return files, gateway, ledger, report


def crashed_settlement(compact_every, op, keep, script=SCRIPT):
    """Settle with a crash at (op, keep); the files left and the gateway."""
    from src.orders.gateway import ScriptedGateway

    files = MemoryFiles()
    gateway = ScriptedGateway(dict(script))
    files.crash_at(op, keep)
    with pytest.raises(Crash):
        settle_on(files, gateway, compact_every)
    return files.restart(), gateway


def amounts_by_key(gateway):
    sent = {}
    for request in gateway.calls:
        sent.setdefault(request.key, set()).add(request.amount)
    return sent


def test_a_settlement_that_crashed_at_any_file_operation_is_completed_by_settling_again():
    """Settlement docs: "A settlement that crashed, in the gateway or in the ledger's files, is completed by settling again with a ledger opened on the same files." Settlement docs: "The gateway never takes money twice for one idempotency key, so a part it captured before the crash is answered with the same reference and is recorded then." Settlement docs: "A declined part is final: the order is `declined`, its remaining parts are cancelled and never sent, and it is never sent to the gateway again." """
    for compact_every in (3, 8):
        _, clean_gateway, clean_ledger, _ = clean_settlement(compact_every)
        final = state(clean_ledger)
        probe = clean_settlement(compact_every)[0]
        ops, log = probe.ops, probe.log
        for op, keep in crash_points(log, keeps=("zero", "all-but-one")):
            where = f"every {compact_every}: crash at {op} keeping {keep}"
            files, gateway = crashed_settlement(compact_every, op, keep)
            ledger, _ = settle_on(files, gateway, compact_every)
            assert state(ledger) == final, where
            assert state(open_ledger(files.restart(), compact_every)) == final, where
            assert gateway.captured == clean_gateway.captured, where
            assert "ORD-F/3" not in gateway.keys, where
            assert all(len(amounts) == 1 for amounts in amounts_by_key(gateway).values()), where
        assert ops > 0


def test_the_settlement_that_completes_reports_the_captures_it_recorded():
    """Settlement docs: "A part counts on the report of the settlement that records its capture." Settlement docs: "The report's `days` hold one `DayTotal` for each settlement date on which this settlement captured at least one part, in date order: the number of parts captured, their gross amount, their fees and their net (gross less fees)." Settlement docs: "The report lists, each in order of processing, the orders that became `captured`, `declined` or `failed` in this settlement, the orders it recorded as `waived`, and every order that is still `pending` when it ends." """
    _, _, clean_ledger, clean_report = clean_settlement(4)
    order = [e.order_id for e in sorted(clean_ledger.entries(), key=lambda e: e.sort_key)]
    log = clean_settlement(4)[0].log
    for op, keep in crash_points(log, keeps=("zero",)):
        where = f"crash at {op}"
        files, gateway = crashed_settlement(4, op, keep)
        before = {e.order_id: e for e in open_ledger(MemoryFiles(files.contents()), 4).entries()}
        ledger, report = settle_on(files, gateway, 4)
        days = {}
        for entry in ledger.entries():
            old = before.get(entry.order_id)
            for part in entry.parts:
                was = old.parts[part.number - 1].status if old is not None else "pending"
                if part.status == "captured" and was != "captured":
                    row = days.setdefault(entry.settlement_date, [0, D("0.00"), D("0.00")])
                    row[0] += 1
                    row[1] += part.amount
                    row[2] += part.fee
        assert [(d.settlement_date, d.captures, d.gross, d.fees, d.net) for d in report.days] == [
            (day, n, gross, fees, gross - fees) for day, (n, gross, fees) in sorted(days.items())
        ], where
        became = lambda status: tuple(  # noqa: E731
            oid for oid in order
            if ledger.entry(oid).status == status and (oid not in before or before[oid].status != status)
        )
        assert tuple(report.captured) == became("captured"), where
        assert tuple(report.declined) == became("declined"), where
        assert tuple(report.waived) == tuple(oid for oid in became("waived")), where
        assert tuple(report.pending) == (), where
    assert [d.settlement_date for d in clean_report.days] == [TUESDAY, date(2024, 4, 3)]


def test_each_answer_is_recorded_before_anything_more_is_sent():
    """Settlement docs: "Settlement records everything that one gateway answer changes about an order (the part, the parts it cancels, the order's status) as one change, and records each answer before it sends anything more to the gateway." Settlement docs: "A settlement first adds a ledger entry for every approved order of its source that the ledger does not have yet, then sends the pending orders to the gateway one order at a time, all of an order's parts before the next order." Settlement docs: "A change is made when the call returns." """
    from src.orders.gateway import CaptureDeclined, GatewayUnavailable, ScriptedGateway
    from src.orders.settlement import SettlementPolicy, settle

    files = MemoryFiles()
    inner = ScriptedGateway({**SCRIPT, "ORD-B/1": ["unavailable"], "ORD-G/1": ["unavailable"] * 3})
    answers = []

    class Watching:
        def capture(self, request):
            saved = open_ledger(MemoryFiles(files.contents()), 3)
            recorded = 0
            for entry in saved.entries():
                for part in entry.parts:
                    recorded += part.attempts + (part.status in ("captured", "declined"))
                    if entry.status in ("declined", "failed"):
                        assert part.status != "pending", entry.order_id
            assert recorded == len(answers), (request.key, answers)
            (part,) = [p for p in saved.entry(request.order_id).parts if p.number == request.part]
            assert (part.status, part.amount) == ("pending", request.amount), request.key
            try:
                reference = inner.capture(request)
            except (CaptureDeclined, GatewayUnavailable) as answer:
                answers.append((request.key, type(answer).__name__))
                raise
            answers.append((request.key, reference))
            return reference

    policy = SettlementPolicy(outage_limit=5)
    ledger = open_ledger(files, 3)
    for _ in range(3):
        settle(the_run(), Watching(), ledger, policy)
    assert ledger.entry("ORD-G").status == "failed"
    assert [p.status for p in ledger.entry("ORD-F").parts] == ["captured", "declined", "cancelled"]


def night_one(script):
    """The first night's settlement, crash-free: the files it leaves, the gateway and its calls so far."""
    files, gateway, _, _ = clean_settlement(8, script)
    return files.restart(), gateway, len(gateway.calls)


def test_an_unavailable_answer_lost_in_a_crash_is_not_counted_as_an_attempt():
    """Settlement docs: "An answer that was not recorded before a crash is lost: the part is sent again, and an unavailable answer lost this way does not count as an attempt." Settlement docs: "A part answered unavailable `max_attempts` [3] times in all, over any number of settlements, fails: the order is `failed`, its remaining parts are cancelled, and it is never sent to the gateway again." """
    from src.orders.settlement import SettlementPolicy, settle

    script = {"ORD-B/1": ["unavailable"] * 3, "ORD-D": ["declined"] * 20}
    files, gateway, _ = night_one(script)
    assert open_ledger(files, 8).entry("ORD-B").parts[0].attempts == 1
    settle(the_run(), gateway, open_ledger(files, 8), SettlementPolicy())
    log = files.log
    seen_lost = False
    for op, keep in crash_points(log, keeps=("zero", "all-but-one")):
        where = f"second night: crash at {op} keeping {keep}"
        files, gateway, calls = night_one(script)
        files.crash_at(op, keep)
        with pytest.raises(Crash):
            settle_on(files, gateway, 8)
        files = files.restart()
        sent = gateway.keys[calls:].count("ORD-B/1")
        counted = open_ledger(MemoryFiles(files.contents()), 8).entry("ORD-B").parts[0].attempts
        assert counted in (1 + sent, sent), where
        seen_lost |= counted == sent and sent == 1
        calls = len(gateway.calls)
        ledger, report = settle_on(files, gateway, 8)
        assert gateway.keys[calls:] == ["ORD-B/1"], where
        entry = ledger.entry("ORD-B")
        assert entry.parts[0].attempts == counted + 1, where
        if counted + 1 == 3:
            assert (entry.status, [p.status for p in entry.parts]) == ("failed", ["failed", "cancelled"]), where
            assert report.failed == ("ORD-B",), where
        else:
            assert (entry.status, [p.status for p in entry.parts]) == ("pending", ["pending", "pending"]), where
            assert report.pending == ("ORD-B",), where
    assert seen_lost
