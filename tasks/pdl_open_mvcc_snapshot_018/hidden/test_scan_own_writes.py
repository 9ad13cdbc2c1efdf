from src.engine import Database
from src.service import KVService


def ledger():
    db = Database()
    with db.begin() as txn:
        for n in (1, 3, 5, 7):
            txn.put(f"acct/{n}", {"balance": n * 100})
    return db


def keys(rows):
    return [key for key, _ in rows]


def test_scan_includes_rows_inserted_by_the_transaction():
    db = ledger()
    txn = db.begin()
    txn.put("acct/2", {"balance": 200})
    txn.put("acct/9", {"balance": 900})
    txn.put("acct/0", {"balance": 0})
    assert keys(txn.scan(prefix="acct/")) == [
        "acct/0", "acct/1", "acct/2", "acct/3", "acct/5", "acct/7", "acct/9",
    ]
    assert txn.scan("acct/2", "acct/4") == [("acct/2", {"balance": 200}), ("acct/3", {"balance": 300})]
    assert txn.count(prefix="acct/") == 7
    assert keys(db.begin().scan(prefix="acct/")) == ["acct/1", "acct/3", "acct/5", "acct/7"]


def test_scan_limit_counts_only_rows_the_transaction_sees():
    db = ledger()
    txn = db.begin()
    txn.delete("acct/1")
    txn.delete("acct/3")
    assert txn.scan(prefix="acct/", limit=2) == [("acct/5", {"balance": 500}), ("acct/7", {"balance": 700})]
    txn.put("acct/4", {"balance": 400})
    assert keys(txn.scan(prefix="acct/", limit=2)) == ["acct/4", "acct/5"]
    assert keys(txn.scan(start="acct/5", prefix="acct/", limit=5)) == ["acct/5", "acct/7"]


def test_reverse_scan_merges_own_writes():
    db = ledger()
    txn = db.begin()
    txn.put("acct/8", {"balance": 800})
    txn.put("acct/4", {"balance": 400})
    txn.delete("acct/7")
    assert keys(txn.scan(prefix="acct/", reverse=True)) == ["acct/8", "acct/5", "acct/4", "acct/3", "acct/1"]
    assert txn.scan(prefix="acct/", reverse=True, limit=2) == [
        ("acct/8", {"balance": 800}),
        ("acct/5", {"balance": 500}),
    ]


def test_scan_bounds_apply_to_own_writes():
    db = ledger()
    txn = db.begin()
    txn.put("acct/2", {"balance": 200})
    txn.put("acct/6", {"balance": 600})
    txn.put("other/1", {"balance": 1})
    assert keys(txn.scan("acct/2", "acct/6")) == ["acct/2", "acct/3", "acct/5"]
    assert keys(txn.scan(prefix="other/")) == ["other/1"]
    assert keys(txn.scan("acct/6")) == ["acct/6", "acct/7", "other/1"]


def test_scan_shows_a_key_recreated_by_the_transaction():
    db = ledger()
    with db.begin() as closer:
        closer.delete("acct/3")
    txn = db.begin()
    assert keys(txn.scan(prefix="acct/")) == ["acct/1", "acct/5", "acct/7"]
    txn.put("acct/3", {"balance": 1})
    txn.delete("acct/5")
    txn.put("acct/5", {"balance": 2})
    assert txn.scan(prefix="acct/") == [
        ("acct/1", {"balance": 100}),
        ("acct/3", {"balance": 1}),
        ("acct/5", {"balance": 2}),
        ("acct/7", {"balance": 700}),
    ]


def test_batch_job_totals_its_staged_rows_while_others_commit():
    db = ledger()
    batch = db.begin()
    batch.put("acct/8", {"balance": 800})
    batch.delete("acct/1")
    with db.begin() as deposit:
        deposit.put("acct/5", {"balance": 550})
    total = sum(row["balance"] for _, row in batch.scan(prefix="acct/"))
    assert total == 300 + 500 + 700 + 800
    batch.put("summary/total", {"total": total})
    batch.commit()
    after = db.begin()
    assert after.get("summary/total") == {"total": 2300}
    assert sum(row["balance"] for _, row in after.scan(prefix="acct/")) == 300 + 550 + 700 + 800


def test_service_scan_inside_a_transaction_sees_own_writes():
    service = KVService(ledger())
    txn = service.handle({"op": "begin"})["txn"]
    service.handle({"op": "put", "txn": txn, "key": "acct/4", "value": {"balance": 400}})
    service.handle({"op": "delete", "txn": txn, "key": "acct/5"})
    response = service.handle({"op": "scan", "txn": txn, "prefix": "acct/", "limit": 3})
    assert response["rows"] == [
        ["acct/1", {"balance": 100}],
        ["acct/3", {"balance": 300}],
        ["acct/4", {"balance": 400}],
    ]
    response = service.handle({"op": "scan", "txn": txn, "prefix": "acct/", "reverse": True})
    assert [row[0] for row in response["rows"]] == ["acct/7", "acct/4", "acct/3", "acct/1"]
