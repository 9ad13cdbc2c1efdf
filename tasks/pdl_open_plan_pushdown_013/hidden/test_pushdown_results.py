"""Optimized pipelines must return exactly what the unoptimized plan returns."""

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


def orders():
    return Pipeline.scan(Catalog({"orders": ORDERS}), "orders")


def ids(rows):
    return [row["id"] for row in rows]


def test_filter_on_a_derived_field():
    pipeline = orders().derive(total="price * qty").filter("total >= 80")
    assert pipeline.collect() == pipeline.collect(optimize=False)
    assert ids(pipeline.collect()) == [3, 5, 6]


def test_filter_after_a_derive_that_overwrites_its_field():
    pipeline = orders().derive(price="price * (1 - discount)").filter("price < 20")
    assert pipeline.collect() == pipeline.collect(optimize=False)
    assert ids(pipeline.collect()) == [1, 2, 4]
    assert pipeline.collect()[0]["price"] == 18.0


def test_filter_on_a_renamed_field():
    pipeline = orders().rename({"qty": "quantity"}).filter("quantity >= 3")
    assert pipeline.collect() == pipeline.collect(optimize=False)
    assert ids(pipeline.collect()) == [1, 2, 6]


def test_rename_onto_a_name_the_rows_already_have():
    pipeline = (
        orders()
        .rename({"list_price": "price"})
        .filter("price > 50")
        .select("id", "price")
    )
    assert pipeline.collect() == pipeline.collect(optimize=False)
    assert pipeline.collect() == [{"id": 2, "price": 60.0}, {"id": 3, "price": 100.0}, {"id": 5, "price": 55.0}]


def test_filter_after_swapping_two_fields():
    pipeline = orders().rename({"price": "qty", "qty": "price"}).filter("qty > 10")
    assert pipeline.collect() == pipeline.collect(optimize=False)
    assert ids(pipeline.collect()) == [1, 3, 5, 6]


def test_filter_on_a_derived_field_that_was_renamed():
    pipeline = (
        orders()
        .derive(net="price * qty * (1 - discount)")
        .rename({"net": "take_home"})
        .filter("take_home >= 55")
    )
    assert pipeline.collect() == pipeline.collect(optimize=False)
    assert ids(pipeline.collect()) == [5, 6]


def test_conjunction_of_source_and_derived_fields():
    pipeline = orders().derive(total="price * qty").filter("region == 'EU' and total > 70")
    assert pipeline.collect() == pipeline.collect(optimize=False)
    assert ids(pipeline.collect()) == [3, 5]


def test_report_that_overwrites_and_renames_before_filtering():
    result = run_report({
        "name": "net_by_order",
        "source": "orders",
        "steps": [
            {"derive": {"amount": "price * qty"}},
            {"derive": {"amount": "amount * (1 - discount)"}},
            {"rename": {"amount": "net_amount", "customer": "client"}},
            {"filter": "net_amount >= 50 and client != 'globex'"},
            {"select": ["id", "client", "net_amount"]},
            {"sort": ["net_amount desc"]},
        ],
    }, Catalog({"orders": ORDERS}))
    assert result.rows == [
        {"id": 6, "client": "umbrella", "net_amount": 240.0},
        {"id": 1, "client": "acme", "net_amount": 54.0},
        {"id": 3, "client": "acme", "net_amount": 50.0},
    ]
