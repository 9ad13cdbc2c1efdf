"""Billing runs (docs/billing.md) on top of reports, segmented storage and snapshots."""

import pytest

from src.catalog import Catalog

LINES = {"name": "lines", "source": "lines", "steps": []}


def policy(**settings):
    from src.billing import BillingPolicy

    settings.setdefault("currency", "EUR")
    return BillingPolicy(**settings)


def close(catalog, period, report=LINES, **settings):
    from src.billing import close_period

    return close_period(catalog, report, period, policy(**settings))


def line(id, customer, placed_at, amount, **extra):
    return dict(id=id, customer=customer, placed_at=placed_at, amount=amount, **extra)


def lines_of(invoice):
    return [(entry["id"], entry["date"], entry["amount"]) for entry in invoice["lines"]]


def summary(invoice):
    return (invoice["number"], invoice["customer"], invoice["subtotal"], invoice["carried"],
            invoice["total"])


def test_period_end_and_line_dates_in_a_negative_offset_zone():
    """Docs: "The billing time zone is the fixed offset from UTC given as the policy's
    `utc_offset`, written `"+HH:MM"` or `"-HH:MM"` (for example `"+01:00"` or `"-03:30"`)";
    "the start belongs to the period, the end does not"; "A line's *date* is the calendar date
    of its `placed_at` in the billing time zone." """
    catalog = Catalog({"lines": [
        line(1, "acme", "2024-04-01T05:29:59Z", 10.0),
        line(2, "acme", "2024-04-01T05:30:00Z", 20.0),
        line(3, "acme", "2024-03-01T03:00:00+00:00", 30.0),
        line(4, "acme", "2024-04-01T01:00:00+01:00", 40.0),
    ]}, segment_rows=2)
    march = close(catalog, "2024-03", utc_offset="-05:30")
    assert [lines_of(inv) for inv in march["invoices"]] == [[
        (3, "2024-02-29", "30.00"), (4, "2024-03-31", "40.00"), (1, "2024-03-31", "10.00"),
    ]]
    april = close(catalog, "2024-04", utc_offset="-05:30")
    assert [lines_of(inv) for inv in april["invoices"]] == [[(2, "2024-04-01", "20.00")]]


def test_timestamps_without_an_offset_are_utc():
    """Docs: "A timestamp written without `Z` or an offset is in UTC."; "A period starts at
    midnight on the first day of its month, billing time zone, and ends at midnight on the
    first day of the next month" """
    catalog = Catalog({"lines": [
        line(1, "acme", "2024-03-31T22:30:00", 5.0),
        line(2, "acme", "2024-03-31T23:00:00", 6.0),
        line(3, "acme", "2024-02-29T23:15:00", 7.0),
    ]})
    march = close(catalog, "2024-03", utc_offset="+01:00")
    assert lines_of(march["invoices"][0]) == [(3, "2024-03-01", "7.00"), (1, "2024-03-31", "5.00")]
    april = close(catalog, "2024-04", utc_offset="+01:00")
    assert lines_of(april["invoices"][0]) == [(2, "2024-04-01", "6.00")]


def test_each_line_is_converted_then_rounded_half_away_from_zero():
    """Docs: "then rounded to whole cents, with halves rounded away from zero: `2.345` becomes
    `2.35` and `-2.345` becomes `-2.35`. Each line is rounded on its own, after conversion; an
    invoice's subtotal is the sum of its rounded lines." """
    catalog = Catalog({"lines": [
        line(1, "acme", "2024-03-02T10:00:00Z", 4.69, currency="USD"),
        line(2, "acme", "2024-03-03T10:00:00Z", -4.69, currency="USD"),
        line(3, "acme", "2024-03-04T10:00:00Z", 0.01, currency="USD"),
        line(4, "acme", "2024-03-05T10:00:00Z", 0.01, currency="USD"),
        line(5, "acme", "2024-03-06T10:00:00Z", 0.125, currency="EUR"),
    ]})
    result = close(catalog, "2024-03", rates={"USD": "0.5"})
    (invoice,) = result["invoices"]
    assert [entry["amount"] for entry in invoice["lines"]] == ["2.35", "-2.35", "0.01", "0.01", "0.13"]
    assert (invoice["subtotal"], invoice["total"]) == ("0.15", "0.15")


def test_amounts_and_rates_are_read_as_they_print():
    """Docs: "Amounts, rates and the minimum are read as the decimal number they print as in
    Python (`str(value)`), so `0.1` is exactly one tenth."; "a line whose `currency` is null or
    missing is in the policy's currency." """
    catalog = Catalog({"lines": [
        line(1, "acme", "2024-03-02T10:00:00Z", 1.005),
        line(2, "acme", "2024-03-03T10:00:00Z", 0.15, currency="CHF"),
        line(3, "acme", "2024-03-04T10:00:00Z", 2.675, currency=None),
        line(4, "acme", "2024-03-05T10:00:00Z", 1.15, currency="CHF"),
    ]})
    result = close(catalog, "2024-03", rates={"CHF": 1.1})
    (invoice,) = result["invoices"]
    assert lines_of(invoice) == [(1, "2024-03-02", "1.01"), (2, "2024-03-03", "0.17"),
                                 (3, "2024-03-04", "2.68"), (4, "2024-03-05", "1.27")]
    assert invoice["subtotal"] == "5.13"


def test_totals_below_the_minimum_are_carried_to_the_next_close():
    """Docs: "When a customer's total is below the policy's `minimum`, no invoice is issued: the
    lines count as billed all the same, and the total becomes the customer's carried balance (a
    negative total is a credit and is carried the same way). A total equal to the minimum is
    invoiced. Issuing an invoice resets the customer's carried balance to zero." """
    catalog = Catalog({"lines": [
        line(1, "acme", "2024-03-02T10:00:00Z", 6.0),
        line(2, "globex", "2024-03-03T10:00:00Z", -3.0),
        line(3, "initech", "2024-03-04T10:00:00Z", 10.0),
    ]})
    march = close(catalog, "2024-03", minimum="10.00")
    assert [summary(inv) for inv in march["invoices"]] == [
        ("INV-000001", "initech", "10.00", "0.00", "10.00")]
    assert march["carried"] == {"acme": "6.00", "globex": "-3.00"}
    catalog.append("lines", [
        line(4, "acme", "2024-04-02T10:00:00Z", 4.0),
        line(5, "globex", "2024-04-03T10:00:00Z", 12.0),
    ])
    april = close(catalog, "2024-04", minimum="10.00")
    assert [summary(inv) for inv in april["invoices"]] == [
        ("INV-000002", "acme", "4.00", "6.00", "10.00")]
    assert april["carried"] == {"globex": "9.00"}


def test_a_total_of_zero_is_invoiced_and_a_credit_reduces_the_next_invoice():
    """Docs: "A total equal to the minimum is invoiced."; "(a negative total is a credit and is
    carried the same way)"; "An invoice's `carried` is the customer's carried balance when the
    close starts, and its `total` is its subtotal plus `carried`." """
    catalog = Catalog({"lines": [
        line(1, "acme", "2024-03-02T10:00:00Z", 25.0),
        line(2, "acme", "2024-03-09T10:00:00Z", -25.0),
        line(3, "globex", "2024-03-03T10:00:00Z", 10.0),
        line(4, "globex", "2024-03-04T10:00:00Z", -15.5),
    ]})
    march = close(catalog, "2024-03")
    assert [summary(inv) for inv in march["invoices"]] == [
        ("INV-000001", "acme", "0.00", "0.00", "0.00")]
    assert march["carried"] == {"globex": "-5.50"}
    catalog.append("lines", [line(5, "globex", "2024-04-01T10:00:00Z", 30.0)])
    april = close(catalog, "2024-04")
    assert [summary(inv) for inv in april["invoices"]] == [
        ("INV-000002", "globex", "30.00", "-5.50", "24.50")]
    assert april["carried"] == {}


def test_invoice_numbers_follow_customer_names_and_never_restart():
    """Docs: "one sequence per catalog that never restarts, not even with a new period. Within a
    close, numbers go to the customers in order of customer name. A customer that gets no
    invoice uses no number." """
    catalog = Catalog({"lines": [
        line(1, "umbrella", "2024-03-02T10:00:00Z", 50.0),
        line(2, "globex", "2024-03-03T10:00:00Z", 1.0),
        line(3, "acme", "2024-03-04T10:00:00Z", 20.0),
        line(4, "initech", "2024-03-05T10:00:00Z", 30.0),
    ]})
    march = close(catalog, "2024-03", minimum="5")
    assert [(inv["number"], inv["customer"]) for inv in march["invoices"]] == [
        ("INV-000001", "acme"), ("INV-000002", "initech"), ("INV-000003", "umbrella")]
    catalog.append("lines", [
        line(5, "umbrella", "2024-04-02T10:00:00Z", 8.0),
        line(6, "globex", "2024-04-03T10:00:00Z", 4.0),
    ])
    april = close(catalog, "2024-04", minimum="5")
    assert [(inv["number"], inv["customer"], inv["total"]) for inv in april["invoices"]] == [
        ("INV-000004", "globex", "5.00"), ("INV-000005", "umbrella", "8.00")]


def test_held_customer_is_billed_by_a_later_close():
    """Docs: "When a line is in a currency for which the policy has no rate, the customer's
    invoice is *held*: nothing is billed for that customer in this close, none of its lines
    count as billed, and its carried balance does not change, so a later close bills those
    lines. The reason names the currency of the customer's first line, in report order, that
    has no rate" """
    catalog = Catalog({"lines": [
        line(1, "initech", "2024-03-20T10:00:00Z", 10.0),
        line(2, "acme", "2024-03-02T10:00:00Z", 12.0),
        line(3, "initech", "2024-03-25T10:00:00Z", 10.0, currency="GBP"),
        line(4, "initech", "2024-03-05T10:00:00Z", 10.0, currency="CHF"),
        line(5, "umbrella", "2024-03-06T10:00:00Z", 7.0),
    ]})
    march = close(catalog, "2024-03", rates={"USD": "0.9"})
    assert march["held"] == [{"customer": "initech", "reason": "no rate for GBP"}]
    assert [(inv["number"], inv["customer"]) for inv in march["invoices"]] == [
        ("INV-000001", "acme"), ("INV-000002", "umbrella")]
    april = close(catalog, "2024-04", rates={"GBP": "1.2", "CHF": "1.05"})
    assert april["held"] == []
    assert [(inv["number"], inv["customer"]) for inv in april["invoices"]] == [
        ("INV-000003", "initech")]
    assert lines_of(april["invoices"][0]) == [
        (4, "2024-03-05", "10.50"), (1, "2024-03-20", "10.00"), (3, "2024-03-25", "12.00")]


def test_held_customer_keeps_its_carried_balance():
    """Docs: "and its carried balance does not change"; "`"carried"`: the carried balance of
    every customer whose carried balance is not zero once the close is done"; "`"held"`:
    `{"customer": ..., "reason": ...}` for each held customer, in order of customer name" """
    catalog = Catalog({"lines": [
        line(1, "umbrella", "2024-03-02T10:00:00Z", 3.0),
        line(2, "acme", "2024-03-03T10:00:00Z", 2.0),
    ]})
    march = close(catalog, "2024-03", minimum="5.00")
    assert march["carried"] == {"acme": "2.00", "umbrella": "3.00"}
    catalog.append("lines", [
        line(3, "umbrella", "2024-04-02T10:00:00Z", 9.0, currency="JPY"),
        line(4, "acme", "2024-04-03T10:00:00Z", 1.0, currency="SEK"),
    ])
    april = close(catalog, "2024-04", minimum="5.00")
    assert april["invoices"] == []
    assert april["held"] == [{"customer": "acme", "reason": "no rate for SEK"},
                             {"customer": "umbrella", "reason": "no rate for JPY"}]
    assert april["carried"] == {"acme": "2.00", "umbrella": "3.00"}
    may = close(catalog, "2024-05", minimum="5.00", rates={"JPY": "0.25", "SEK": "0.1"})
    assert [summary(inv) for inv in may["invoices"]] == [
        ("INV-000001", "umbrella", "2.25", "3.00", "5.25")]
    assert may["carried"] == {"acme": "2.10"}


def test_late_rows_are_billed_on_the_next_close_and_billed_ids_are_ignored():
    """Docs: "Closing a period bills every line placed before the end of the period that no
    earlier close billed. This includes lines placed in earlier months that reached the table
    after their month was closed: they go on the next invoice, with their own dates."; "A row
    whose `id` was billed by an earlier close is ignored: it is not billed again and is not
    listed anywhere." """
    catalog = Catalog({"lines": [
        line(1, "acme", "2024-03-10T10:00:00Z", 10.0),
        line(2, "acme", "2024-04-03T10:00:00Z", 20.0),
    ]}, segment_rows=2)
    close(catalog, "2024-03")
    catalog.append("lines", [
        line(1, "acme", "2024-03-10T10:00:00Z", 11.0),
        line(3, "acme", "2024-03-30T10:00:00Z", 30.0),
        line(4, "acme", "2024-04-01T00:00:00Z", 40.0),
    ])
    april = close(catalog, "2024-04")
    assert april["skipped"] == []
    assert lines_of(april["invoices"][0]) == [
        (3, "2024-03-30", "30.00"), (4, "2024-04-01", "40.00"), (2, "2024-04-03", "20.00")]
    assert summary(april["invoices"][0]) == ("INV-000002", "acme", "90.00", "0.00", "90.00")


def test_skip_reasons_follow_the_order_of_the_checks():
    """Docs: "the first check that applies decides what happens to the row"; "A row whose `id`
    is the same as that of an earlier row of this run that got past checks 1 to 3 is skipped
    with the reason `"duplicate"`."; "`"skipped"`: `{"id": ..., "reason": ...}` for each skipped
    row, in report order (`"id"` is the row's id, or `None` when it has none)" """
    catalog = Catalog({"lines": [
        line(1, "acme", "2024-04-02T10:00:00Z", 5.0),
        line(1, "acme", "2024-03-02T10:00:00Z", 6.0),
        line(2, "acme", "2024-03-03T10:00:00Z", None),
        line(2, "acme", "2024-03-04T10:00:00Z", 7.0),
        {"customer": "acme", "placed_at": "2024-03-05T10:00:00Z", "amount": 1.0},
        line(3, "acme", "31/03/2024 10:00", 8.0),
        line(3, "acme", "2024-03-06T10:00:00Z", 9.0),
        line(4, "globex", "2024-03-07T10:00:00Z", 2.0),
        line(4, "acme", "2024-03-08T10:00:00Z", 3.0),
    ]})
    march = close(catalog, "2024-03")
    assert march["skipped"] == [
        {"id": 1, "reason": "duplicate"}, {"id": 2, "reason": "incomplete"},
        {"id": None, "reason": "incomplete"}, {"id": 3, "reason": "bad date"},
        {"id": 4, "reason": "duplicate"}]
    assert [(inv["customer"], lines_of(inv)) for inv in march["invoices"]] == [
        ("acme", [(2, "2024-03-04", "7.00"), (3, "2024-03-06", "9.00")]),
        ("globex", [(4, "2024-03-07", "2.00")])]
    april = close(catalog, "2024-04")
    assert lines_of(april["invoices"][0]) == [(1, "2024-04-02", "5.00")]
    assert april["skipped"] == [
        {"id": 1, "reason": "duplicate"}, {"id": 2, "reason": "incomplete"},
        {"id": None, "reason": "incomplete"}, {"id": 3, "reason": "bad date"}]


def test_lines_at_the_same_instant_keep_the_report_order():
    """Docs: "The lines of an invoice are ordered by the instant of their `placed_at`, earliest
    first; lines placed at the same instant keep the order of the report." """
    catalog = Catalog({"lines": [
        line(1, "acme", "2024-03-10T12:00:00+02:00", 5.0),
        line(2, "acme", "2024-03-10T09:00:00Z", 9.0),
        line(3, "acme", "2024-03-10T10:00:00", 7.0),
        line(4, "acme", "2024-03-10T05:00:00-05:00", 8.0),
    ]})
    report = {"name": "by_amount", "source": "lines", "steps": [{"sort": ["amount desc"]}]}
    (invoice,) = close(catalog, "2024-03", report=report)["invoices"]
    assert [entry["id"] for entry in invoice["lines"]] == [2, 4, 3, 1]


def test_closing_the_last_period_again_returns_its_first_result():
    """Docs: "Closing the last period closed again changes nothing and returns the same result
    as its first close did, even when rows were added or changed since; such rows wait for the
    next period."; "Closing a period earlier than the last period closed raises
    `BillingError`." """
    from src.billing import BillingError

    catalog = Catalog({"lines": [
        line(1, "acme", "2024-03-10T10:00:00Z", 10.0),
        line(2, "globex", "2024-03-11T10:00:00Z", 3.0),
    ]})
    first = close(catalog, "2024-03", minimum="5")
    catalog.append("lines", [line(3, "acme", "2024-03-12T10:00:00Z", 4.0),
                             line(4, "globex", "2024-03-13T10:00:00Z", 4.0)])
    again = close(catalog, "2024-03", minimum="5")
    assert again == first
    with pytest.raises(BillingError):
        close(catalog, "2024-02", minimum="5")
    april = close(catalog, "2024-04", minimum="5")
    assert [summary(inv) for inv in april["invoices"]] == [
        ("INV-000002", "globex", "4.00", "3.00", "7.00")]
    assert april["carried"] == {"acme": "4.00"}


def test_a_period_may_be_left_out():
    """Docs: "Periods are closed in calendar order; a period may be left out. Closing a period
    earlier than the last period closed raises `BillingError`."; "Closing a period bills every
    line placed before the end of the period that no earlier close billed." """
    from src.billing import BillingError

    catalog = Catalog({"lines": [
        line(1, "acme", "2023-12-20T10:00:00Z", 10.0),
        line(2, "acme", "2024-01-20T10:00:00Z", 20.0),
        line(3, "acme", "2024-02-20T10:00:00Z", 30.0),
        line(4, "acme", "2024-04-01T10:00:00Z", 40.0),
    ]})
    close(catalog, "2023-12")
    march = close(catalog, "2024-03")
    assert lines_of(march["invoices"][0]) == [(2, "2024-01-20", "20.00"), (3, "2024-02-20", "30.00")]
    assert march["invoices"][0]["number"] == "INV-000002"
    with pytest.raises(BillingError):
        close(catalog, "2024-02")


def test_the_ledger_is_saved_and_restored_with_the_catalog(tmp_path):
    """Docs: "The billing ledger (which ids have been billed, the carried balances, the next
    invoice number, and the last period closed with its result) belongs to the catalog:
    `Catalog.save()` and `Catalog.dumps()` write it into the snapshot, and `Catalog.load()` and
    `Catalog.loads()` restore it." """
    catalog = Catalog({"lines": [
        line(1, "acme", "2024-03-10T10:00:00Z", 10.0),
        line(2, "globex", "2024-03-11T10:00:00Z", 3.0),
        line(3, "initech", "2024-03-12T10:00:00Z", 8.0),
    ]}, segment_rows=2)
    first = close(catalog, "2024-03", minimum="5")
    catalog.save(tmp_path / "catalog.json")
    restored = Catalog.load(tmp_path / "catalog.json")
    assert close(restored, "2024-03", minimum="5") == first
    restored.append("lines", [line(4, "globex", "2024-04-02T10:00:00Z", 4.0),
                              line(5, "acme", "2024-04-03T10:00:00Z", 6.0)])
    april = close(restored, "2024-04", minimum="5")
    assert [summary(inv) for inv in april["invoices"]] == [
        ("INV-000003", "acme", "6.00", "0.00", "6.00"),
        ("INV-000004", "globex", "4.00", "3.00", "7.00")]
    again = Catalog.loads(restored.dumps())
    assert close(again, "2024-04", minimum="5") == april


def test_a_snapshot_without_billing_data_has_never_been_billed():
    """Docs: "A snapshot without billing data restores a catalog that has never been billed.";
    "Invoices are numbered `"INV-000001"`, `"INV-000002"`, and so on" """
    rows = [line(1, "acme", "2024-03-10T10:00:00Z", 10.0)]
    catalog = Catalog({"lines": rows})
    snapshot = catalog.dumps()
    billed = Catalog.loads(catalog.dumps())
    close(billed, "2024-03")
    fresh = Catalog.loads(snapshot)
    result = close(fresh, "2024-02")
    assert result["invoices"] == [] and result["carried"] == {}
    march = close(fresh, "2024-03")
    assert [(inv["number"], lines_of(inv)) for inv in march["invoices"]] == [
        ("INV-000001", [(1, "2024-03-10", "10.00")])]


ORDERS = [
    {"order_no": 101, "client": "acme", "placed_at": "2024-03-02T09:00:00Z", "price": 12.5, "qty": 2, "status": "shipped"},
    {"order_no": 102, "client": "internal", "placed_at": "2024-03-03T09:00:00Z", "price": 99.0, "qty": 1, "status": "shipped"},
    {"order_no": 103, "client": "globex", "placed_at": "2024-03-04T09:00:00Z", "price": 4.99, "qty": 3, "status": "shipped"},
    {"order_no": 104, "client": "acme", "placed_at": "2024-03-05T09:00:00Z", "price": 40.0, "qty": 1, "status": "cancelled"},
    {"order_no": 105, "client": "globex", "placed_at": "2024-03-06T09:00:00Z", "price": 10.0, "qty": 1, "status": "shipped"},
    {"order_no": 106, "client": "acme", "placed_at": "2024-03-07T09:00:00Z", "price": 2.5, "qty": 3, "status": "shipped"},
]

BILLABLE_ORDERS = {
    "name": "billable_orders",
    "source": "orders",
    "steps": [
        {"derive": {"amount": "price * qty"}},
        {"rename": {"order_no": "id", "client": "customer"}},
        {"filter": "status == 'shipped' and customer != 'internal' and amount > 0"},
    ],
}


def test_billing_from_a_report_that_derives_renames_and_filters():
    """Docs: "`billable_orders` is a report definition, exactly as accepted by `run_report()`
    (see `src/reports.py`). The report runs against the catalog and each row it returns is a
    candidate *line*." README: "Optimization never changes what a pipeline returns" """
    catalog = Catalog({"orders": ORDERS}, segment_rows=4)
    result = close(catalog, "2024-03", report=BILLABLE_ORDERS, utc_offset="+01:00")
    assert [(summary(inv), lines_of(inv)) for inv in result["invoices"]] == [
        (("INV-000001", "acme", "32.50", "0.00", "32.50"),
         [(101, "2024-03-02", "25.00"), (106, "2024-03-07", "7.50")]),
        (("INV-000002", "globex", "24.97", "0.00", "24.97"),
         [(103, "2024-03-04", "14.97"), (105, "2024-03-06", "10.00")]),
    ]


def test_nightly_batch_with_new_currency_and_channel_fields():
    """Docs: "a line whose `currency` is null or missing is in the policy's currency."
    README: "Appended rows do not need the same fields as the rows already stored; a field that
    earlier rows lack reads as null for them."; "Skipping never changes the result" """
    catalog = Catalog({"orders": ORDERS}, segment_rows=4)
    catalog.append("orders", [
        {"order_no": 107, "client": "acme", "placed_at": "2024-03-08T09:00:00Z", "price": 10.0, "qty": 1, "status": "shipped", "channel": "web", "currency": "USD"},
        {"order_no": 108, "client": "globex", "placed_at": "2024-03-09T09:00:00Z", "price": 3.0, "qty": 5, "status": "shipped", "channel": "web"},
        {"order_no": 109, "client": "acme", "placed_at": "2024-03-10T09:00:00Z", "price": 7.0, "qty": 1, "status": "shipped", "channel": "phone", "currency": "USD"},
        {"order_no": 110, "client": "acme", "placed_at": "2024-03-11T09:00:00Z", "price": 4.0, "qty": 2, "status": "shipped", "channel": "web", "currency": "USD"},
    ])
    web = dict(BILLABLE_ORDERS, name="web_orders",
               steps=BILLABLE_ORDERS["steps"] + [{"filter": "channel == 'web'"}])
    result = close(catalog, "2024-03", report=web, rates={"USD": "0.9"})
    assert [(inv["customer"], lines_of(inv)) for inv in result["invoices"]] == [
        ("acme", [(107, "2024-03-08", "9.00"), (110, "2024-03-11", "7.20")]),
        ("globex", [(108, "2024-03-09", "15.00")]),
    ]


def test_report_threshold_written_constant_first():
    """README: "Comparisons may be written either way round: `price > 10` and `10 < price` mean
    the same thing." Docs: "Within a close, numbers go to the customers in order of customer
    name." """
    catalog = Catalog({"orders": ORDERS}, segment_rows=2)
    report = dict(BILLABLE_ORDERS, steps=BILLABLE_ORDERS["steps"] + [{"filter": "3 <= qty"}])
    result = close(catalog, "2024-03", report=report)
    assert [(inv["number"], inv["customer"], lines_of(inv)) for inv in result["invoices"]] == [
        ("INV-000001", "acme", [(106, "2024-03-07", "7.50")]),
        ("INV-000002", "globex", [(103, "2024-03-04", "14.97")]),
    ]
