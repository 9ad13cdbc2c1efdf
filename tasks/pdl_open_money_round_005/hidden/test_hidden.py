from datetime import date
from decimal import Decimal

from src.cost_centres import split_by_cost_centre
from src.installments import plan_installments
from src.invoice import Invoice
from src.money import Money


def invoice_in(code, *lines):
    invoice = Invoice.create(f"INV-{code}", code, date(2024, 6, 1))
    for quantity, price, rate in lines:
        invoice.add_line("item", quantity, price, rate)
    return invoice


def amounts(plan):
    return [i.amount for i in plan]


def test_issue_yen_installments_add_up_to_the_invoice():
    """Issue: "Expected, for every currency we support (whatever its number of decimals): installments and cost-centre shares always add up exactly to the invoice total / subtotal, … with the extra units going to the earliest parts…" """
    invoice = invoice_in("JPY", (1, "10000", "0.10"))
    assert invoice.total == Money("11000", "JPY")
    plan = plan_installments(invoice, 3)
    assert amounts(plan) == [Money("3667", "JPY"), Money("3667", "JPY"), Money("3666", "JPY")]
    assert sum(amounts(plan)) == invoice.total


def test_dinar_installments_keep_every_fils():
    """Issue: "Dinar example: a KWD invoice with a total of KWD 1.235 split into 2 installments comes out as KWD 0.620 + KWD 0.610 = KWD 1.230, so 5 fils are never collected."

    Issue: "A KWD 10.000 invoice split in 3 gives 3.340 / 3.330 / 3.330 instead of 3.334 / 3.333 / 3.333."
    """
    invoice = invoice_in("KWD", (1, "1.235", "0"))
    assert amounts(plan_installments(invoice, 2)) == [Money("0.618", "KWD"), Money("0.617", "KWD")]
    invoice = invoice_in("KWD", (4, "2.5", "0"))
    assert amounts(plan_installments(invoice, 3)) == [
        Money("3.334", "KWD"),
        Money("3.333", "KWD"),
        Money("3.333", "KWD"),
    ]


def test_installments_add_up_in_every_currency():
    """Issue: "Expected, for every currency we support (whatever its number of decimals): installments and cost-centre shares always add up exactly to the invoice total / subtotal…" """
    for code in ("USD", "EUR", "JPY", "KRW", "KWD", "BHD"):
        invoice = invoice_in(code, (3, "1234.567", "0.05"), (2, "89.1", "0.15"), (1, "0.7", "0"))
        for count in range(1, 8):
            plan = plan_installments(invoice, count)
            assert sum(amounts(plan)) == invoice.total, (code, count)
        deposit = plan_installments(invoice, 3, weights=[5, 2, 2])
        assert sum(amounts(deposit)) == invoice.total, code


def test_equal_installments_differ_by_at_most_one_minor_unit():
    """Issue: "…the split is as even as possible: equal parts differ by at most one minor unit, with the extra units going to the earliest parts, the way USD plans already behave (USD 100.00 in 3 -> 33.34 / 33.33 / 33.33)." """
    for code in ("JPY", "KRW", "KWD", "BHD", "USD"):
        invoice = invoice_in(code, (1, "1000", "0.075"))
        for count in (3, 6, 7):
            minors = [i.amount.minor for i in plan_installments(invoice, count)]
            assert max(minors) - min(minors) <= 1, (code, count, minors)
            assert minors == sorted(minors, reverse=True), (code, count, minors)
            assert sum(minors) == invoice.total.minor, (code, count)


def test_cost_centre_split_in_yen_and_dinar():
    """Issue: "Finance sees the same thing when the net amount is charged back with `split_by_cost_centre`: a ¥10,000 subtotal over three cost centres becomes ¥3,333 + ¥3,333 + ¥3,333."

    src/cost_centres.py docstring: "The result keeps the order of ``shares`` and its values add up to the invoice subtotal."
    """
    yen = invoice_in("JPY", (1, "10000", "0.10"))
    split = split_by_cost_centre(yen, {"ops": 1, "sales": 1, "rd": 1})
    assert list(split.values()) == [Money("3334", "JPY"), Money("3333", "JPY"), Money("3333", "JPY")]
    dinar = invoice_in("KWD", (1, "1.235", "0.05"))
    split = split_by_cost_centre(dinar, {"ops": 1, "sales": 1})
    assert list(split.values()) == [Money("0.618", "KWD"), Money("0.617", "KWD")]
    assert sum(split.values()) == dinar.subtotal
