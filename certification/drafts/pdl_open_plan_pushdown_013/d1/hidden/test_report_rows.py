"""Rows returned by pipelines and reports whose filters follow derives and renames."""

from src.catalog import Catalog
from src.pipeline import Pipeline
from src.reports import run_report

ORDERS = [
    {"id": 1, "customer": "acme", "region": "EU", "price": 20.0, "list_price": 25.0, "qty": 3, "discount": 0.1},
    {"id": 2, "customer": "globex", "region": "US", "price": 5.0, "list_price": 60.0, "qty": 10, "discount": 0.0},
    {"id": 3, "customer": "acme", "region": "EU", "price": 100.0, "list_price": 100.0, "qty": 1, "discount": 0.5},
    {"id": 4, "customer": "initech", "region": "APAC", "price": 8.0, "list_price": 9.0, "qty": None, "discount": 0.0},
    {"id": 5, "customer": "globex", "region": "EU", "price": 40.0, "list_price": 55.0, "qty": 2, "discount": 0.25},
    {"id": 6, "customer": "umbrella", "region": "US", "price": 60.0, "list_price": 45.0, "qty": 4, "discount": 0.0},
]


def orders(segment_rows=2):
    return Pipeline.scan(Catalog({"orders": ORDERS}, segment_rows=segment_rows), "orders")


def ids(rows):
    return [row["id"] for row in rows]


def test_filter_on_a_computed_column_and_a_source_column():
    """Issue: "p.collect()   # [] -- orders 1 and 3 expected" """
    catalog = Catalog({"orders": [
        {"id": 1, "region": "EU", "price": 20.0, "qty": 3, "discount": 0.1},
        {"id": 2, "region": "US", "price": 5.0, "qty": 10, "discount": 0.0},
        {"id": 3, "region": "EU", "price": 100.0, "qty": 1, "discount": 0.5},
    ]})
    pipeline = Pipeline.scan(catalog, "orders").derive(total="price * qty").filter("region == 'EU' and total > 50")
    assert ids(pipeline.collect()) == [1, 3]
    assert ids(orders().derive(total="price * qty").filter("total >= 80").collect()) == [3, 5, 6]


def test_filter_after_a_derive_that_overwrites_its_column():
    """Issue: "a derive that overwrites a column, e.g. `.derive(price="price * (1 - discount)").filter("price < 20")`, picks rows by the old price;" """
    rows = orders().derive(price="price * (1 - discount)").filter("price < 20").collect()
    assert ids(rows) == [1, 2, 4]
    assert rows[0]["price"] == 18.0


def test_filter_on_a_renamed_column():
    """Issue: "`.rename({"qty": "quantity"}).filter("quantity >= 3")` returns nothing;" """
    rows = orders().rename({"qty": "quantity"}).filter("quantity >= 3").collect()
    assert ids(rows) == [1, 2, 6]
    assert rows[0]["quantity"] == 3 and "qty" not in rows[0]


def test_rename_onto_an_existing_name_and_swapping_two_columns():
    """Issue: "renaming onto a name the rows already have (`.rename({"list_price": "price"})`, then a filter on `price`), and swapping two columns in one rename (`.rename({"price": "qty", "qty": "price"})`), filter on the wrong values;" """
    onto = orders().rename({"list_price": "price"}).filter("price > 50").select("id", "price")
    assert onto.collect() == [{"id": 2, "price": 60.0}, {"id": 3, "price": 100.0}, {"id": 5, "price": 55.0}]
    swapped = orders().rename({"price": "qty", "qty": "price"}).filter("qty > 10")
    assert ids(swapped.collect()) == [1, 3, 5, 6]


def test_old_name_of_a_renamed_column_is_gone():
    """README: "After a `rename()` the old names no longer exist, unless another pair of the same rename moves a field onto them." """
    pipeline = orders().rename({"price": "unit_price"}).filter("price > 10 or unit_price < 6")
    assert ids(pipeline.collect()) == [2]
    moved_back = orders().rename({"list_price": "price", "price": "unit_price"}).filter("price > 50")
    assert ids(moved_back.collect()) == [2, 3, 5]


def test_net_by_order_report():
    """Issue: "our `net_by_order` report derives `amount` twice (`amount = price * qty`, then `amount = amount - refunded`), renames `amount` to `net` and `customer` to `client`, then filters `"net >= 50 and client != 'internal'"`: it returns nothing." """
    catalog = Catalog({"orders": [
        {"id": 1, "customer": "acme", "price": 20.0, "qty": 3, "refunded": 0.0, "amount": 999.0},
        {"id": 2, "customer": "internal", "price": 50.0, "qty": 2, "refunded": 0.0, "amount": 999.0},
        {"id": 3, "customer": "globex", "price": 30.0, "qty": 2, "refunded": 20.0, "amount": 999.0},
        {"id": 4, "customer": "initech", "price": 100.0, "qty": 1, "refunded": 40.0, "amount": 1.0},
        {"id": 5, "customer": "acme", "price": 10.0, "qty": 4, "refunded": None, "amount": 999.0},
    ]}, segment_rows=2)
    result = run_report({
        "name": "net_by_order",
        "source": "orders",
        "steps": [
            {"derive": {"amount": "price * qty"}},
            {"derive": {"amount": "amount - refunded"}},
            {"rename": {"amount": "net", "customer": "client"}},
            {"filter": "net >= 50 and client != 'internal'"},
            {"select": ["id", "client", "net"]},
        ],
    }, catalog)
    assert result.rows == [
        {"id": 1, "client": "acme", "net": 60.0},
        {"id": 4, "client": "initech", "net": 60.0},
    ]


def test_renamed_and_computed_columns_through_several_steps():
    """README: "A condition moves below a `rename()`, rewritten to the names the fields had before the rename." """
    pipeline = (
        orders()
        .rename({"price": "unit_price"})
        .derive(total="unit_price * qty")
        .filter("unit_price >= 40 and total > 100")
    )
    assert ids(pipeline.collect()) == [6]
    pipeline = orders().sort("price desc").rename({"region": "area"}).filter("area == 'EU'").select("id")
    assert pipeline.collect() == [{"id": 3}, {"id": 5}, {"id": 1}]
