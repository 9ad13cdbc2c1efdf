"""Segment skipping, appended rows and the plans the planner produces."""

from src.catalog import Catalog
from src.expr import Logical, render  # noqa: F401
from src.pipeline import Pipeline
from src.planner import Filter
from src.reports import run_report

# Twelve orders in three segments of four: prices rise from segment to segment.
BIG_ORDERS = [
    {"id": 1, "customer": "acme", "region": "EU", "price": 12.0, "qty": 5},
    {"id": 2, "customer": "globex", "region": "EU", "price": 5.0, "qty": 8},
    {"id": 3, "customer": "acme", "region": "EU", "price": 30.0, "qty": 1},
    {"id": 4, "customer": "initech", "region": "EU", "price": 18.0, "qty": 2},
    {"id": 5, "customer": "globex", "region": "US", "price": 35.0, "qty": 9},
    {"id": 6, "customer": "umbrella", "region": "US", "price": 40.0, "qty": 5},
    {"id": 7, "customer": "acme", "region": "US", "price": 60.0, "qty": 1},
    {"id": 8, "customer": "globex", "region": "US", "price": 25.0, "qty": 3},
    {"id": 9, "customer": "initech", "region": "APAC", "price": 41.0, "qty": 2},
    {"id": 10, "customer": "acme", "region": "APAC", "price": 90.0, "qty": 7},
    {"id": 11, "customer": "umbrella", "region": "APAC", "price": 55.0, "qty": None},
    {"id": 12, "customer": "globex", "region": "APAC", "price": 45.0, "qty": 6},
]

OLD_ORDERS = [
    {"id": 1, "customer": "acme", "price": 20.0},
    {"id": 2, "customer": "globex", "price": 5.0},
    {"id": 3, "customer": "acme", "price": 100.0},
    {"id": 4, "customer": "initech", "price": 8.0},
    {"id": 5, "customer": "globex", "price": 40.0},
    {"id": 6, "customer": "umbrella", "price": 60.0},
]

NIGHTLY_BATCH = [
    {"id": 7, "customer": "acme", "price": 15.0, "channel": "web"},
    {"id": 8, "customer": "globex", "price": 22.0, "channel": "phone"},
    {"id": 9, "customer": "initech", "price": 31.0, "channel": "web"},
    {"id": 10, "customer": "acme", "price": 12.0, "channel": "web"},
]


def big_catalog():
    return Catalog({"orders": BIG_ORDERS}, segment_rows=4)


def loaded_catalog():
    """Six old orders (segments of four and two), then the nightly batch."""
    catalog = Catalog({"orders": OLD_ORDERS}, segment_rows=4)
    catalog.append("orders", NIGHTLY_BATCH)
    return catalog


def ids(rows):
    return [row["id"] for row in rows]


def conditions(predicate):
    parts = predicate.operands if isinstance(predicate, Logical) and predicate.op == "and" else (predicate,)
    return {render(part) for part in parts}


def filters(pipeline):
    """``[(kind of the step below the filter, {conditions})]`` for the plan that runs, top first."""
    return [(node.child.kind, conditions(node.predicate))
            for node in pipeline.optimized_plan().chain() if isinstance(node, Filter)]


def kinds(pipeline):
    return [node.kind for node in pipeline.optimized_plan().chain()]


# -- thresholds written either way round ------------------------------------


def test_bulk_discount_report_on_a_segmented_table():
    """Issue: "Our `bulk_discount` report filters `"qty >= 5 and 40 <= price"`; on the production table it misses orders that plainly match" """
    result = run_report({
        "name": "bulk_discount",
        "source": "orders",
        "steps": [{"filter": "qty >= 5 and 40 <= price"}, {"select": ["id", "qty", "price"]}],
    }, big_catalog())
    assert result.rows == [
        {"id": 6, "qty": 5, "price": 40.0},
        {"id": 10, "qty": 7, "price": 90.0},
        {"id": 12, "qty": 6, "price": 45.0},
    ]


def test_reversed_comparisons_under_not_and_or():
    """README: "Comparisons may be written either way round: `price > 10` and `10 < price` mean the same thing." """
    scan = Pipeline.scan(big_catalog(), "orders")
    assert ids(scan.filter("not (38 > price)").collect()) == [6, 7, 9, 10, 11, 12]
    assert ids(scan.filter("not (20 <= price)").collect()) == [1, 2, 4]
    assert ids(scan.filter("50 < price or 2 > qty").collect()) == [3, 7, 10, 11]


# -- plans ---------------------------------------------------------------


def test_conditions_settle_at_different_depths():
    """README: "Conditions that cannot move stay where they are, so one filter can end up split between several places in the plan." """
    pipeline = (
        Pipeline.scan(big_catalog(), "orders")
        .rename({"customer": "client"})
        .derive(total="price * qty")
        .select("id", "client", "total")
        .filter("client == 'acme' and total >= 60 and price > 0")
    )
    assert kinds(pipeline) == ["Filter", "Project", "Filter", "Derive", "Rename", "Filter", "Scan"]
    assert filters(pipeline) == [
        ("Project", {"price > 0"}),
        ("Derive", {"total >= 60"}),
        ("Scan", {"customer == 'acme'"}),
    ]
    assert pipeline.collect() == []


# -- appended rows ----------------------------------------------------------


def test_profile_counts_rows_that_lack_an_appended_column():
    """README: "`Catalog.profile(table)` reports, for each column, how many rows have it null or missing (`nulls`), how many have a value (`values`), and its smallest and largest value (`low`, `high`)." """
    catalog = loaded_catalog()
    channel = catalog.profile("orders")["channel"]
    assert (channel.nulls, channel.values, channel.low, channel.high) == (6, 4, "phone", "web")
    price = catalog.profile("orders")["price"]
    assert (price.nulls, price.values, price.low, price.high) == (0, 10, 5.0, 100.0)


def test_batches_appended_after_a_restore_are_found():
    """Issue: "after a restart from the snapshot they are found again until the next append." README: "Comparisons may be written either way round: `price > 10` and `10 < price` mean the same thing." """
    restored = Catalog.loads(Catalog({"orders": OLD_ORDERS}, segment_rows=4).dumps())
    restored.append("orders", NIGHTLY_BATCH[:1])
    restored.append("orders", NIGHTLY_BATCH[1:])
    result = Pipeline.scan(restored, "orders").filter("channel == 'web' and 10 < price").run()
    assert ids(result.rows) == [7, 9, 10]
    assert result.stats.segments_skipped == 1
