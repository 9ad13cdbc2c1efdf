"""More of what the issue, the README, docs/billing.md and docs/durability.md state (version 3)."""

import json

import pytest

from src.catalog import Catalog
from src.expr import Logical, render
from src.pipeline import Pipeline
from src.planner import Filter
from src.reports import run_report
from src.storage.fs import Crash, MemoryFS


def conditions(predicate):
    parts = predicate.operands if isinstance(predicate, Logical) and predicate.op == "and" else (predicate,)
    return {render(part) for part in parts}


def filters(plan):
    """``[(kind of the step below the filter, {conditions})]`` for a plan, top first."""
    return [(node.child.kind, conditions(node.predicate))
            for node in plan.chain() if isinstance(node, Filter)]


def kinds(plan):
    return [node.kind for node in plan.chain()]


def lines_of(invoice):
    return [(entry["id"], entry["date"], entry["amount"]) for entry in invoice["lines"]]


# -- billing: every number is read as it prints ----------------------------------


def test_rates_and_the_minimum_given_as_floats_are_read_as_they_print():
    """docs/billing.md: "Amounts, rates and the minimum are read as the decimal number they
    print as in Python (`str(value)`), so `0.1` is exactly one tenth."; "then rounded to whole
    cents, with halves rounded away from zero"; "A total equal to the minimum is invoiced."
    Issue: `BillingPolicy(currency="EUR", utc_offset="-03:30", rates={"USD": 0.92, "GBP":
    "1.17"}, minimum="5.00")` (rates given as floats or as text)."""
    from src.billing import BillingPolicy, close_period

    catalog = Catalog({"lines": [
        {"id": 1, "customer": "acme", "placed_at": "2024-03-04T10:00:00Z", "amount": 0.5, "currency": "GBP"},
        {"id": 2, "customer": "acme", "placed_at": "2024-03-05T10:00:00Z", "amount": 4.61},
        {"id": 3, "customer": "bolt", "placed_at": "2024-03-06T10:00:00Z", "amount": -0.5, "currency": "GBP"},
        {"id": 4, "customer": "bolt", "placed_at": "2024-03-07T10:00:00Z", "amount": 2.5, "currency": "USD"},
    ]})
    policy = BillingPolicy(currency="EUR", rates={"USD": 0.92, "GBP": 1.17}, minimum=5.2)
    result = close_period(catalog, {"name": "lines", "source": "lines", "steps": []}, "2024-03", policy)
    assert [(inv["number"], inv["customer"], lines_of(inv), inv["subtotal"], inv["total"])
            for inv in result["invoices"]] == [
        ("INV-000001", "acme", [(1, "2024-03-04", "0.59"), (2, "2024-03-05", "4.61")], "5.20", "5.20"),
    ]
    assert result["carried"] == {"bolt": "1.71"}


def test_a_customer_without_lines_gets_no_invoice_whatever_it_carries():
    """docs/billing.md: "A close issues at most one invoice per customer, from the customer's
    lines of this close. A customer without lines in a close gets no invoice in it."; "When a
    customer's total is below the policy's `minimum`, no invoice is issued: the lines count as
    billed all the same, and the total becomes the customer's carried balance"; "A customer
    that gets no invoice uses no number." """
    from src.billing import BillingPolicy, close_period

    report = {"name": "lines", "source": "lines", "steps": []}
    catalog = Catalog({"lines": [
        {"id": 1, "customer": "acme", "placed_at": "2024-03-04T10:00:00Z", "amount": 6.0},
        {"id": 2, "customer": "bolt", "placed_at": "2024-03-05T10:00:00Z", "amount": 12.0},
    ]})
    march = close_period(catalog, report, "2024-03", BillingPolicy(currency="EUR", minimum="10.00"))
    assert [(inv["number"], inv["customer"]) for inv in march["invoices"]] == [("INV-000001", "bolt")]
    assert march["carried"] == {"acme": "6.00"}
    catalog.append("lines", [
        {"id": 3, "customer": "bolt", "placed_at": "2024-04-05T10:00:00Z", "amount": 5.0},
    ])
    april = close_period(catalog, report, "2024-04", BillingPolicy(currency="EUR", minimum="5.00"))
    assert [(inv["number"], inv["customer"], inv["total"]) for inv in april["invoices"]] == [
        ("INV-000002", "bolt", "5.00")]
    assert april["carried"] == {"acme": "6.00"}
    catalog.append("lines", [
        {"id": 4, "customer": "acme", "placed_at": "2024-05-02T10:00:00Z", "amount": 1.0},
    ])
    may = close_period(catalog, report, "2024-05", BillingPolicy(currency="EUR", minimum="5.00"))
    assert [(inv["number"], inv["customer"], lines_of(inv), inv["subtotal"], inv["carried"],
             inv["total"]) for inv in may["invoices"]] == [
        ("INV-000003", "acme", [(4, "2024-05-02", "1.00")], "1.00", "6.00", "7.00")]
    assert may["carried"] == {}


# -- reports: filters run early and let the scan skip segments --------------------

BILLABLE_ORDERS = {
    "name": "billable_orders",
    "source": "orders",
    "steps": [
        {"derive": {"amount": "price * qty"}},
        {"rename": {"order_no": "id", "client": "customer"}},
        {"filter": "status == 'shipped' and customer != 'internal' and amount > 0"},
    ],
}

# Four segments of two orders: shipped, cancelled, internal, mixed.
SEGMENTED_ORDERS = [
    {"order_no": 201, "client": "acme", "price": 10.0, "qty": 2, "status": "shipped"},
    {"order_no": 202, "client": "bolt", "price": 5.0, "qty": 1, "status": "shipped"},
    {"order_no": 203, "client": "acme", "price": 7.0, "qty": 1, "status": "cancelled"},
    {"order_no": 204, "client": "bolt", "price": 9.0, "qty": 3, "status": "cancelled"},
    {"order_no": 205, "client": "internal", "price": 99.0, "qty": 1, "status": "shipped"},
    {"order_no": 206, "client": "internal", "price": 12.0, "qty": 2, "status": "shipped"},
    {"order_no": 207, "client": "cora", "price": 0.0, "qty": 3, "status": "shipped"},
    {"order_no": 208, "client": "cora", "price": 4.0, "qty": 2, "status": "shipped"},
]


def test_the_billable_orders_report_filters_at_the_scan_and_skips_segments():
    """Issue: "we rely on filters running early and on whole segments being skipped, we read
    plans with `explain()`, and we chart `segments_skipped` from `run_report(...).stats`."
    README: "Each condition of a filter (the parts joined by `and`) runs as early in the
    pipeline as the fields it reads allow."; "A condition moves below a `derive()` unless it
    reads a field that the derive computes or overwrites. A condition moves below a
    `rename()`, rewritten to the names the fields had before the rename."; "A filter that
    reaches the scan is checked against each segment's statistics first, and a segment is
    skipped when its statistics prove that none of its rows can match." """
    catalog = Catalog({"orders": SEGMENTED_ORDERS}, segment_rows=2)
    result = run_report(BILLABLE_ORDERS, catalog)
    assert [(row["id"], row["customer"], row["amount"]) for row in result.rows] == [
        (201, "acme", 20.0), (202, "bolt", 5.0), (208, "cora", 8.0)]
    stats = result.stats
    assert (stats.segments_read, stats.segments_skipped, stats.rows_scanned) == (2, 2, 4)
    plan = Pipeline.scan(catalog, "orders").derive(amount="price * qty").rename(
        {"order_no": "id", "client": "customer"}).filter(
        "status == 'shipped' and customer != 'internal' and amount > 0").optimized_plan()
    assert kinds(plan) == ["Rename", "Filter", "Derive", "Filter", "Scan"]
    assert filters(plan) == [
        ("Derive", {"amount > 0"}),
        ("Scan", {"status == 'shipped'", "client != 'internal'"}),
    ]


# Three segments of two orders: EU, US, EU.
REGIONAL_ORDERS = [
    {"id": 1, "region": "EU", "price": 30.0, "qty": 2, "discount": 0.5},
    {"id": 2, "region": "EU", "price": 10.0, "qty": 4, "discount": 0.0},
    {"id": 3, "region": "US", "price": 80.0, "qty": 1, "discount": 0.0},
    {"id": 4, "region": "US", "price": 25.0, "qty": 3, "discount": 0.0},
    {"id": 5, "region": "EU", "price": 60.0, "qty": 1, "discount": 0.75},
    {"id": 6, "region": "EU", "price": 18.0, "qty": 1, "discount": 0.0},
]


def test_the_issues_derive_examples_on_a_segmented_table():
    """Issue: "`.derive(total="price * qty").filter("region == 'EU' and total > 50")` returns
    nothing, `.derive(price="price * (1 - discount)").filter("price < 20")` picks rows by the
    old price". README: "A condition moves below a `derive()` unless it reads a field that the
    derive computes or overwrites."; "Skipping never changes the result, only the work done." """
    catalog = Catalog({"orders": REGIONAL_ORDERS}, segment_rows=2)
    orders = Pipeline.scan(catalog, "orders")
    totals = orders.derive(total="price * qty").filter("region == 'EU' and total > 50").run()
    assert [(row["id"], row["total"]) for row in totals.rows] == [(1, 60.0), (5, 60.0)]
    assert (totals.stats.segments_read, totals.stats.segments_skipped) == (2, 1)
    net = orders.derive(price="price * (1 - discount)").filter("price < 20")
    assert kinds(net.optimized_plan()) == ["Filter", "Derive", "Scan"]
    result = net.run()
    assert [(row["id"], row["price"]) for row in result.rows] == [
        (1, 15.0), (2, 10.0), (5, 15.0), (6, 18.0)]
    assert (result.stats.segments_read, result.stats.segments_skipped) == (3, 0)


RENAMED_ORDERS = [
    {"id": 1, "client": "acme", "price": 10.0, "list_price": 12.0},
    {"id": 2, "client": "bolt", "price": 30.0, "list_price": 25.0},
    {"id": 3, "client": "acme", "price": 50.0, "list_price": 60.0},
    {"id": 4, "client": "cora", "price": 70.0, "list_price": 65.0},
]


def test_filters_on_names_a_rename_removed_or_reused():
    """README: "After a `rename()` the old names no longer exist, unless another pair of the same
    rename moves a field onto them."; "`rename({old: new, ...})` | rename fields; all pairs
    apply at once"; "Expressions use SQL null semantics: a missing field reads as null";
    "Optimization never changes what a pipeline returns: `collect()` gives the rows you would
    get by running the steps one after another, in the order written." """
    orders = Pipeline.scan(Catalog({"orders": RENAMED_ORDERS}, segment_rows=2), "orders")
    renamed = orders.rename({"client": "customer"})
    assert renamed.filter("client == 'acme'").collect() == []
    assert [row["id"] for row in renamed.filter("client == 'acme' or customer == 'bolt'").collect()] == [2]
    chained = orders.rename({"list_price": "price", "price": "old_price"})
    assert [(row["id"], row["price"], row["old_price"])
            for row in chained.filter("price > 50 and old_price < 60").collect()] == [(3, 60.0, 50.0)]
    assert chained.filter("list_price > 0").collect() == []
    assert [row["id"] for row in chained.filter("not (list_price > 0) or old_price >= 70").collect()] == [4]


# -- the durable store: the folder the store of the issue left behind -------------

FOLDER = "db"

CHECKPOINTED = [
    {"id": 1, "customer": "acme", "placed_at": "2024-03-01T09:00:00Z", "price": 10.0, "qty": 1, "status": "shipped"},
    {"id": 2, "customer": "bolt", "placed_at": "2024-03-02T09:00:00Z", "price": 4.0, "qty": 2, "status": "shipped"},
    {"id": 3, "customer": "acme", "placed_at": "2024-03-03T09:00:00Z", "price": 6.0, "qty": 1, "status": "open"},
]
LOGGED = [
    {"id": 4 + n, "customer": ("acme", "bolt", "cora")[n % 3],
     "placed_at": f"2024-03-{10 + n:02d}T09:00:00Z", "price": 2.5 + n, "qty": 2, "status": "shipped"}
    for n in range(6)
]
TORN = {"id": 10, "customer": "cora", "placed_at": "2024-03-20T09:00:00Z", "price": 50.0, "qty": 1,
        "status": "shipped"}
LATER = [
    {"id": 11, "customer": "bolt", "placed_at": "2024-03-25T09:00:00Z", "price": 7.0, "qty": 1, "status": "shipped"},
    {"id": 12, "customer": "cora", "placed_at": "2024-03-26T09:00:00Z", "price": 3.0, "qty": 3, "status": "shipped"},
]
BILLABLE = {
    "name": "billable",
    "source": "orders",
    "steps": [{"derive": {"amount": "price * qty"}}, {"filter": "status == 'shipped'"}],
}


def older_store():
    """The store's folder as the `src/store.py` the issue was written against left it.

    Its checkpoint is a catalog snapshot as `Catalog.dumps()` writes it, and its log holds one
    JSON record per line, as that version's `_do()` wrote them: six complete appends, then
    the start of a seventh that a power cut interrupted (so that `Store.open()` failed with
    "db/log.jsonl: line 7 is not a valid record").
    """
    fs = MemoryFS()
    snapshot = {"format": 1, "tables": {"orders": {
        "segment_rows": 2, "segments": [CHECKPOINTED[:2], CHECKPOINTED[2:]]}}}
    fs.write_text(f"{FOLDER}/checkpoint.json", json.dumps(snapshot, sort_keys=True))
    log = "".join(json.dumps({"op": "append", "table": "orders", "rows": [row]}, sort_keys=True) + "\n"
                  for row in LOGGED)
    torn = json.dumps({"op": "append", "table": "orders", "rows": [TORN]}, sort_keys=True)
    fs.write_text(f"{FOLDER}/log.jsonl", log + torn[:len(torn) // 2])
    return fs


def open_store(fs):
    from src.store import Store

    return Store.open(fs, FOLDER, segment_rows=2)


def segments(store):
    return [[row["id"] for row in segment.rows] for segment in store.catalog.table("orders").segments]


def policy():
    from src.billing import BillingPolicy

    return BillingPolicy(currency="EUR", utc_offset="+01:00", minimum="5.00")


def test_the_store_that_refused_to_open_opens_and_carries_on():
    """Issue: "After one cut during the nightly load, `Store.open()` refused to open the store at
    all (`SnapshotError: db/log.jsonl: line 7 is not a valid record`)". docs/durability.md:
    "After a crash, `Store.open()` on the same folder restores the catalog as it was after the
    last acknowledged operation, or as it was after the operation that the crash interrupted";
    "A crash may also interrupt `Store.open()` itself, any number of times in a row. The open
    that finally succeeds restores exactly the catalog that an open without crashes would have
    restored."; "Once opened, a store carries on as if no crash had happened: the operations
    that follow are kept like any others" """
    restored = [[1, 2], [3, 4], [5, 6], [7, 8], [9]]
    assert segments(open_store(older_store())) == restored
    trial = older_store()
    start = trial.steps
    open_store(trial)
    for step in range(1, trial.steps - start + 1):
        for keep in (0, 1, 10**6):
            fs = older_store()
            fs.crash_at(step, keep)
            with pytest.raises(Crash):
                open_store(fs)
            fs.restart()
            assert segments(open_store(fs)) == restored, (step, keep)
    fs = older_store()
    store = open_store(fs)
    store.append("orders", LATER)
    march = store.close_period(BILLABLE, "2024-03", policy())
    assert [(inv["number"], inv["customer"], inv["total"]) for inv in march["invoices"]] == [
        ("INV-000001", "acme", "26.00"), ("INV-000002", "bolt", "35.00"),
        ("INV-000003", "cora", "33.00")]
    reopened = open_store(fs)
    assert segments(reopened) == restored[:-1] + [[9, 11], [12]]
    assert reopened.close_period(BILLABLE, "2024-03", policy()) == march


def test_a_checkpoint_cut_anywhere_after_opening_that_store_keeps_every_order_once():
    """Issue: "after another, which hit while a checkpoint was running, every order loaded since
    the previous checkpoint was in `orders` twice."; "whatever happened, no order may be billed
    twice or lost". docs/durability.md: "`checkpoint()` changes nothing in the catalog; it only
    shortens the work of the next `Store.open()`."; "Once opened, a store carries on as if no
    crash had happened: the operations that follow are kept like any others, and later crashes
    are survived in the same way." """
    expected = [[1, 2], [3, 4], [5, 6], [7, 8], [9, 11], [12]]
    trial = older_store()
    store = open_store(trial)
    store.append("orders", LATER)
    start = trial.steps
    store.checkpoint()
    total = trial.steps - start
    assert total >= 2
    for step in range(1, total + 1):
        for keep in (0, 1, 10**6):
            fs = older_store()
            store = open_store(fs)
            store.append("orders", LATER)
            fs.crash_at(step, keep)
            with pytest.raises(Crash):
                store.checkpoint()
            fs.restart()
            store = open_store(fs)
            assert segments(store) == expected, (step, keep, fs.cut)
            store.append("orders", [dict(TORN, id=13)])
            store.checkpoint()
            assert segments(open_store(fs)) == expected[:-1] + [[12, 13]], (step, keep, fs.cut)
