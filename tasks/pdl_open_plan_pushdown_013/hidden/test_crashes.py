"""The durable store (docs/durability.md) under crashes at every step of its operations.

Each test enumerates every step that an operation takes on the in-memory file system
(src/storage/fs.py), cuts it (for a cut write or append: with several lengths of the text
that reached the file), restarts the machine and opens the store again.
"""

import pytest

from src.catalog import Catalog
from src.storage.fs import Crash, MemoryFS

FOLDER = "db"
SEGMENT_ROWS = 2

BILLABLE = {
    "name": "billable",
    "source": "orders",
    "steps": [
        {"derive": {"amount": "price * qty"}},
        {"filter": "status == 'shipped'"},
    ],
}


def order(id, customer, placed_at, price, qty=1, status="shipped", **extra):
    return dict(id=id, customer=customer, placed_at=placed_at, price=price, qty=qty,
                status=status, **extra)


FIRST = [
    order(1, "acme", "2024-02-03T10:00:00", 12.5, 2),
    order(2, "bolt", "2024-02-10T08:30:00+01:00", 3.1),
    order(3, "acme", "2024-03-01T00:30:00+02:00", 7.25, 4),
    order(4, "cora", "2024-02-28T12:00:00Z", 40, 1, status="open"),
]
SECOND = [
    order(5, "bolt", "2024-02-20T09:00:00", 1.2, 2),
    order(6, "cora", "2024-03-05T16:45:00", 19.99, 3, currency="USD"),
    order(7, "acme", "2024-02-29T23:59:59", 0.5, 9),
]
THIRD = [
    order(8, "bolt", "2024-02-27T11:00:00", 2.75, 2, channel="web"),
    order(2, "bolt", "2024-02-10T08:30:00+01:00", 3.1),
    order(9, "dune", "2024-03-18T10:10:00-05:00", 105, 1, channel="web"),
    order(10, "acme", "2024-03-31T23:00:00-02:00", 4.4, 5),
]
FOURTH = [
    order(11, "cora", "2024-04-02T09:00:00", 8, 2, currency="GBP"),
    order(12, "dune", "2024-04-09T14:00:00", 3, 1),
    order(14, "bolt", "2024-03-22T10:00:00", 6.5, 1),
]
EXTRA = [
    order(13, "acme", "2024-04-15T10:00:00", 6, 1),
    order(15, "dune", "2024-02-14T09:00:00", 2.2, 1),
]


def policy():
    from src.billing import BillingPolicy

    return BillingPolicy(currency="EUR", utc_offset="+01:00", rates={"USD": "0.92"},
                         minimum="5.00")


def open_store(fs):
    from src.store import Store

    return Store.open(fs, FOLDER, segment_rows=SEGMENT_ROWS)


def probe(catalog):
    """What billing would do next: close February to May on a copy of the catalog."""
    from src.billing import BillingError, close_period

    if "orders" not in catalog.table_names():
        return None
    copy = Catalog.loads(catalog.dumps(), segment_rows=SEGMENT_ROWS)
    outcomes = []
    for period in ("2024-02", "2024-03", "2024-04", "2024-05"):
        try:
            outcomes.append(close_period(copy, BILLABLE, period, policy()))
        except BillingError:
            outcomes.append("BillingError")
    return outcomes


def state(store):
    catalog = store.catalog
    tables = {name: catalog.rows(name) for name in catalog.table_names()}
    return tables, probe(catalog)


# -- operations ---------------------------------------------------------------

def register(rows):
    return lambda store: store.register("orders", rows)


def append(rows):
    return lambda store: store.append("orders", rows)


def close(period):
    return lambda store: store.close_period(BILLABLE, period, policy())


def checkpoint(store):
    return store.checkpoint()


def run(fs, operations):
    store = open_store(fs)
    for operation in operations:
        operation(store)
    return store


def reference(operations):
    """The state after ``operations`` on a file system that never crashes."""
    return state(run(MemoryFS(), operations))


def cuts(setup, operation):
    """Every crash during ``operation`` after ``setup``: the crashed file systems, restarted."""
    fs = MemoryFS()
    store = run(fs, setup)
    start = fs.steps
    operation(store)
    total = fs.steps - start
    crashed = []
    for step in range(1, total + 1):
        keeps = [0]
        while keeps:
            keep = keeps.pop(0)
            fs = MemoryFS()
            store = run(fs, setup)
            fs.crash_at(step, keep)
            with pytest.raises(Crash):
                operation(store)
            fs.restart()
            crashed.append(fs)
            length = fs.cut[2]
            if keep == 0 and length:
                keeps = sorted({1, length // 2, length - 1, length} - {0})
    assert crashed, "the operation wrote nothing"
    return crashed


BEFORE_APPEND = [register(FIRST), append(SECOND), close("2024-02"), checkpoint]
BEFORE_CLOSE = [register(FIRST), append(SECOND), close("2024-02"), checkpoint, append(THIRD)]


# -- one operation, cut anywhere ----------------------------------------------

def test_an_append_cut_anywhere_is_kept_or_lost_whole():
    """Docs: "After a crash, `Store.open()` on the same folder restores the catalog as it was
    after the last acknowledged operation, or as it was after the operation that the crash
    interrupted: never anything in between." """
    before = reference(BEFORE_APPEND)
    after = reference(BEFORE_APPEND + [append(THIRD)])
    for fs in cuts(BEFORE_APPEND, append(THIRD)):
        assert state(open_store(fs)) in (before, after), fs.cut


def test_appends_after_a_recovery_are_kept():
    """Docs: "Once opened, a store carries on as if no crash had happened: the operations that
    follow are kept like any others, and later crashes are survived in the same way." """
    before = reference(BEFORE_APPEND)
    outcomes = [
        (before, reference(BEFORE_APPEND + [append(EXTRA), append(FOURTH)])),
        (reference(BEFORE_APPEND + [append(THIRD)]),
         reference(BEFORE_APPEND + [append(THIRD), append(EXTRA), append(FOURTH)])),
    ]
    for fs in cuts(BEFORE_APPEND, append(THIRD)):
        store = open_store(fs)
        recovered = state(store)
        assert recovered in [first for first, _ in outcomes], fs.cut
        expected = next(later for first, later in outcomes if first == recovered)
        store.append("orders", EXTRA)
        store = open_store(fs)
        store.append("orders", FOURTH)
        assert state(open_store(fs)) == expected, fs.cut


def test_a_checkpoint_cut_anywhere_changes_nothing():
    """Docs: "`checkpoint()` changes nothing in the catalog; it only shortens the work of the
    next `Store.open()`."; "no acknowledged operation is ever lost" """
    setup = BEFORE_CLOSE + [close("2024-03")]
    expected = reference(setup)
    expected_later = reference(setup + [append(FOURTH)])
    for fs in cuts(setup, checkpoint):
        store = open_store(fs)
        assert state(store) == expected, fs.cut
        store.append("orders", FOURTH)
        assert state(open_store(fs)) == expected_later, fs.cut


def test_a_second_checkpoint_cut_anywhere_changes_nothing():
    """Docs: "`checkpoint()` changes nothing in the catalog; it only shortens the work of the
    next `Store.open()`."; "Tables, their rows, their segments and the billing ledger are all
    restored" """
    setup = BEFORE_CLOSE + [close("2024-03"), append(FOURTH), checkpoint, append(EXTRA)]
    expected = reference(setup)
    for fs in cuts(setup, checkpoint):
        assert state(open_store(fs)) == expected, fs.cut


def test_a_close_cut_anywhere_is_kept_or_lost_whole():
    """Docs: "an interrupted operation is either kept whole or lost whole"; "Tables, their rows,
    their segments and the billing ledger are all restored" """
    before = reference(BEFORE_CLOSE)
    after = reference(BEFORE_CLOSE + [close("2024-03")])
    assert before != after
    for fs in cuts(BEFORE_CLOSE, close("2024-03")):
        assert state(open_store(fs)) in (before, after), fs.cut


def test_a_close_run_again_after_a_crash_hands_back_the_same_invoices():
    """Issue: "after a restart we run the job again, and the invoices it hands back must be the
    ones the close would have issued without the crash". Docs: "an interrupted
    `close_period()` that was kept hands back its result" """
    store = run(MemoryFS(), BEFORE_CLOSE)
    march = store.close_period(BILLABLE, "2024-03", policy())
    store.append("orders", FOURTH)
    april = store.close_period(BILLABLE, "2024-04", policy())
    assert march["invoices"] and april["invoices"]
    for fs in cuts(BEFORE_CLOSE, close("2024-03")):
        store = open_store(fs)
        assert store.close_period(BILLABLE, "2024-03", policy()) == march, fs.cut
        store.append("orders", FOURTH)
        assert store.close_period(BILLABLE, "2024-04", policy()) == april, fs.cut
        store = open_store(fs)
        assert store.close_period(BILLABLE, "2024-04", policy()) == april, fs.cut


def test_a_close_that_fails_changes_nothing_even_after_a_restart():
    """Docs: "When it raises `BillingError` it changes nothing."; "no acknowledged operation is
    ever lost" """
    from src.billing import BillingError

    fs = MemoryFS()
    store = run(fs, BEFORE_CLOSE + [close("2024-03")])
    expected = state(store)
    with pytest.raises(BillingError):
        store.close_period(BILLABLE, "2024-02", policy())
    store.append("orders", FOURTH)
    expected_later = reference(BEFORE_CLOSE + [close("2024-03"), append(FOURTH)])
    assert state(open_store(fs)) == expected_later
    assert expected != expected_later


# -- crashes while opening ------------------------------------------------------

def open_cut_anywhere(fs, depth):
    """Open ``fs``, cutting the open at every step, ``depth`` crashes in a row.

    Yields each file system the opens ran on, with the store finally opened on it.
    """
    trial = fs.clone()
    start = trial.steps
    open_store(trial)
    total = trial.steps - start
    survivor = fs.clone()
    yield survivor, open_store(survivor)
    if depth == 0:
        return
    for step in range(1, total + 1):
        keeps = [0]
        while keeps:
            keep = keeps.pop(0)
            again = fs.clone()
            again.crash_at(step, keep)
            with pytest.raises(Crash):
                open_store(again)
            again.restart()
            yield from open_cut_anywhere(again, depth - 1)
            length = again.cut[2]
            if keep == 0 and length:
                keeps = sorted({1, length // 2, length - 1, length} - {0})


def test_an_open_cut_by_crashes_restores_what_an_uninterrupted_open_would():
    """Docs: "A crash may also interrupt `Store.open()` itself, any number of times in a row. The
    open that finally succeeds restores exactly the catalog that an open without crashes would
    have restored." """
    setups = [(BEFORE_APPEND, append(THIRD)), (BEFORE_CLOSE, close("2024-03")),
              (BEFORE_CLOSE, checkpoint)]
    for setup, operation in setups:
        for fs in cuts(setup, operation):
            expected = state(open_store(fs.clone()))
            for _, store in open_cut_anywhere(fs, depth=2):
                assert state(store) == expected, fs.cut


def test_the_store_carries_on_after_crashes_while_opening():
    """Docs: "Once opened, a store carries on as if no crash had happened: the operations that
    follow are kept like any others"; "no acknowledged operation is ever lost" """
    before = reference(BEFORE_APPEND)
    outcomes = [
        (before, reference(BEFORE_APPEND + [append(EXTRA)])),
        (reference(BEFORE_APPEND + [append(THIRD)]),
         reference(BEFORE_APPEND + [append(THIRD), append(EXTRA)])),
    ]
    for fs in cuts(BEFORE_APPEND, append(THIRD)):
        for opened, store in open_cut_anywhere(fs, depth=1):
            recovered = state(store)
            assert recovered in [first for first, _ in outcomes], fs.cut
            expected = next(later for first, later in outcomes if first == recovered)
            store.append("orders", EXTRA)
            assert state(open_store(opened)) == expected, fs.cut


# -- a day of work ----------------------------------------------------------------

DAY = [("change", register(FIRST)), ("change", append(SECOND)), ("close", close("2024-02")),
       ("checkpoint", checkpoint), ("change", append(THIRD)), ("close", close("2024-03")),
       ("change", append(FOURTH)), ("checkpoint", checkpoint), ("change", append(EXTRA)),
       ("close", close("2024-04"))]


def test_a_day_of_work_with_a_crash_anywhere_ends_as_without_it():
    """Issue: "whatever happened, no order may be billed twice or lost, no invoice number used
    twice". Docs: "no acknowledged operation is ever lost, and an interrupted operation is either
    kept whole or lost whole."; "So a job that was cut by a crash can simply be run again once the
    store is open" """
    fs = MemoryFS()
    store = open_store(fs)
    references = [state(store)]
    results = []
    for kind, operation in DAY:
        results.append(operation(store))
        references.append(state(store))
    total = fs.steps
    for step in range(1, total + 1):
        for keep in (0, 1, 10**6):
            fs = MemoryFS()
            fs.crash_at(step, keep)
            store = open_store(fs)
            done = 0
            with pytest.raises(Crash):
                for kind, operation in DAY:
                    operation(store)
                    done += 1
            fs.restart()
            store = open_store(fs)
            recovered = state(store)
            assert recovered in references[done:done + 2], (step, keep, fs.cut)
            if DAY[done][0] == "change" and recovered == references[done + 1]:
                done += 1
            for index in range(done, len(DAY)):
                kind, operation = DAY[index]
                outcome = operation(store)
                if kind == "close":
                    assert outcome == results[index], (step, keep, index)
            assert state(store) == references[-1], (step, keep)
            assert state(open_store(fs)) == references[-1], (step, keep)
