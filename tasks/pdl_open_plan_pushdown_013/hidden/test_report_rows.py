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


def test_rename_onto_an_existing_name_and_swapping_two_columns():
    """README: "rename fields; all pairs apply at once, so two names can be swapped; a renamed field replaces any field that already had the new name" """
    onto = orders().rename({"list_price": "price"}).filter("price > 50").select("id", "price")
    assert onto.collect() == [{"id": 2, "price": 60.0}, {"id": 3, "price": 100.0}, {"id": 5, "price": 55.0}]
    swapped = orders().rename({"price": "qty", "qty": "price"}).filter("qty > 10")
    assert ids(swapped.collect()) == [1, 3, 5, 6]


def test_net_by_order_report():
    """README: "Optimization never changes what a pipeline returns: `collect()` gives the rows you would get by running the steps one after another, in the order written." """
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

