"""Filters that can run early still do, and are rewritten where names change."""

from src.catalog import Catalog
from src.pipeline import Pipeline

ORDERS = [
    {"id": 1, "customer": "acme", "region": "EU", "price": 20.0, "qty": 3},
    {"id": 2, "customer": "globex", "region": "US", "price": 5.0, "qty": 10},
    {"id": 3, "customer": "acme", "region": "EU", "price": 100.0, "qty": 1},
    {"id": 4, "customer": "initech", "region": "APAC", "price": 8.0, "qty": None},
    {"id": 5, "customer": "globex", "region": "EU", "price": 40.0, "qty": 2},
    {"id": 6, "customer": "umbrella", "region": "US", "price": 60.0, "qty": 4},
]


def orders():
    return Pipeline.scan(Catalog({"orders": ORDERS}), "orders")


def steps(pipeline):
    """The optimized plan as (kind, detail) pairs, top step first."""
    result = []
    for line in pipeline.explain().splitlines():
        kind, _, rest = line.strip().partition("[")
        result.append((kind, rest[:-1]))
    return result


def position(plan, kind):
    found = [i for i, (k, _) in enumerate(plan) if k == kind]
    assert len(found) == 1, plan
    return found[0]


def filter_parts(plan, start, stop):
    """Conjuncts of every filter in plan[start:stop]."""
    parts = set()
    for kind, detail in plan[start:stop]:
        if kind == "Filter":
            parts.update(detail.split(" and "))
    return parts


def check_results(pipeline, expected_ids):
    rows = pipeline.collect()
    assert rows == pipeline.collect(optimize=False)
    assert [row["id"] for row in rows] == expected_ids


def test_source_field_conjunct_runs_before_derive():
    pipeline = orders().derive(total="price * qty").filter("region == 'EU' and total > 70")
    plan = steps(pipeline)
    derive = position(plan, "Derive")
    assert filter_parts(plan, derive + 1, len(plan)) == {"region == 'EU'"}
    assert filter_parts(plan, 0, derive) == {"total > 70"}
    check_results(pipeline, [3, 5])


def test_only_the_overwritten_field_conjunct_stays_above_derive():
    pipeline = orders().derive(price="price * 2").filter("qty >= 2 and price > 50")
    plan = steps(pipeline)
    derive = position(plan, "Derive")
    assert filter_parts(plan, derive + 1, len(plan)) == {"qty >= 2"}
    assert filter_parts(plan, 0, derive) == {"price > 50"}
    check_results(pipeline, [5, 6])


def test_filter_on_renamed_field_runs_before_rename_under_old_name():
    pipeline = orders().rename({"customer": "client"}).filter("client == 'acme'")
    plan = steps(pipeline)
    rename = position(plan, "Rename")
    assert filter_parts(plan, 0, rename) == set()
    assert filter_parts(plan, rename + 1, len(plan)) == {"customer == 'acme'"}
    check_results(pipeline, [1, 3])
    assert pipeline.collect()[0]["client"] == "acme"


def test_swapped_names_are_translated_when_pushing():
    pipeline = orders().rename({"price": "qty", "qty": "price"}).filter("price >= 3")
    plan = steps(pipeline)
    rename = position(plan, "Rename")
    assert filter_parts(plan, 0, rename) == set()
    assert filter_parts(plan, rename + 1, len(plan)) == {"qty >= 3"}
    check_results(pipeline, [1, 2, 6])


def test_conjunct_travels_through_derive_and_rename_to_the_scan():
    pipeline = (
        orders()
        .rename({"qty": "quantity"})
        .derive(total="price * quantity")
        .filter("quantity > 1 and total > 55")
    )
    plan = steps(pipeline)
    derive = position(plan, "Derive")
    rename = position(plan, "Rename")
    assert derive < rename
    assert filter_parts(plan, 0, derive) == {"total > 55"}
    assert filter_parts(plan, derive + 1, rename) == set()
    assert filter_parts(plan, rename + 1, len(plan)) == {"qty > 1"}
    check_results(pipeline, [1, 5, 6])


def test_conjuncts_settle_at_different_depths_under_a_select():
    pipeline = (
        orders()
        .derive(total="price * qty")
        .select("id", "total", "region")
        .filter("total > 70 and region == 'EU'")
    )
    plan = steps(pipeline)
    project = position(plan, "Project")
    derive = position(plan, "Derive")
    assert filter_parts(plan, 0, project) == set()
    assert filter_parts(plan, project + 1, derive) == {"total > 70"}
    assert filter_parts(plan, derive + 1, len(plan)) == {"region == 'EU'"}
    check_results(pipeline, [3, 5])
