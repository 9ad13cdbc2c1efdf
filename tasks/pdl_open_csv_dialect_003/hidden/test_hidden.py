from datetime import date
from decimal import Decimal

from src.importer import import_statement


def test_soll_haben_columns_with_decimal_comma():
    """Issue: "Expected: debit and credit columns are read in the same number format as the rest of the file (dot for thousands and comma for decimals in these exports), debits come out negative and credits positive…" """
    text = (
        '"Buchungstag";"Verwendungszweck";"Soll";"Haben";"Saldo"\n'
        '"01.04.2024";"Gehalt April";"";"1.234,56";"2.234,56"\n'
        '"02.04.2024";"Bäckerei Kartenzahlung";"12,50";"";"2.222,06"\n'
        '"03.04.2024";"Versicherung";"1.020,00";"";"1.202,06"\n'
    )
    statement = import_statement(text)
    assert statement.dialect.decimal_sep == ","
    assert [tx.amount for tx in statement.transactions] == [
        Decimal("1234.56"),
        Decimal("-12.50"),
        Decimal("-1020.00"),
    ]
    assert statement.transactions[1].booking_date == date(2024, 4, 2)
    assert statement.closing_balance == Decimal("1202.06")


def test_tab_separated_debit_credit_with_decimal_comma():
    """Issue: "The same happens with a tab-separated export from another bank that uses English "Debit"/"Credit" headers but German-style numbers." """
    text = (
        "Booking date\tPayee\tDescription\tDebit\tCredit\tCurrency\n"
        "15.05.2024\tStadtwerke\tAbschlag Mai\t74,30\t\tEUR\n"
        "16.05.2024\tFinanzamt\tErstattung 2023\t\t1.311,08\tEUR\n"
        "20.05.2024\tAutohaus Meyer\tInspektion\t2.480,99\t\tEUR\n"
    )
    statement = import_statement(text)
    assert statement.dialect.delimiter == "\t"
    assert [(tx.counterparty, tx.amount) for tx in statement.transactions] == [
        ("Stadtwerke", Decimal("-74.30")),
        ("Finanzamt", Decimal("1311.08")),
        ("Autohaus Meyer", Decimal("-2480.99")),
    ]


def test_soll_haben_totals_use_the_file_number_format():
    """Issue: "Expected: debit and credit columns are read in the same number format as the rest of the file … and `statement.net_change` adds up to the real amount of money moved." """
    text = (
        "Buchungstag;Valuta;Buchungstext;Soll;Haben;W\u00e4hrung\n"
        "28.06.2024;28.06.2024;Gehalt Juni;;3.100,00;EUR\n"
        "01.07.2024;01.07.2024;Miete Juli;1.450,00;;EUR\n"
        "02.07.2024;02.07.2024;Bonus;;2.000;EUR\n"
        "03.07.2024;03.07.2024;Kartenzahlung Tankstelle;61,07;;EUR\n"
    )
    statement = import_statement(text)
    assert [tx.amount for tx in statement.transactions] == [
        Decimal("3100.00"),
        Decimal("-1450.00"),
        Decimal("2000"),
        Decimal("-61.07"),
    ]
    assert statement.net_change == Decimal("3588.93")
