import pytest

from src.config import DatabaseOptions
from src.engine import Database
from src.errors import WriteConflictError
from src.service import KVService

ACCOUNTS = ["acct/1", "acct/2", "acct/3", "acct/4"]


def bank(gc_every=0):
    db = Database(options=DatabaseOptions(gc_every=gc_every))
    with db.begin() as txn:
        for key in ACCOUNTS:
            txn.put(key, {"balance": 100})
    return db


def transfer(db, source, target, amount):
    with db.begin() as txn:
        txn.put(source, {"balance": txn.get(source)["balance"] - amount})
        txn.put(target, {"balance": txn.get(target)["balance"] + amount})


def settlement_batch(db, rounds=3):
    for _ in range(rounds):
        transfer(db, "acct/1", "acct/2", 10)
        transfer(db, "acct/3", "acct/4", 25)
        transfer(db, "acct/2", "acct/3", 5)


def write(db, key, value):
    with db.begin() as txn:
        if value is None:
            txn.delete(key)
        else:
            txn.put(key, value)


def stamps(db, key):
    return [version.commit_ts for version in db.versions(key)]


def test_report_snapshot_keeps_its_balances_through_automatic_gc():
    db = bank(gc_every=1)
    report = db.snapshot()
    settlement_batch(db)
    for key in ACCOUNTS:
        assert report.get(key) == {"balance": 100}
    assert db.begin().get("acct/1") == {"balance": 70}


def test_report_scan_total_is_stable_while_a_batch_commits():
    db = bank(gc_every=2)
    report = db.snapshot()
    first_page = report.scan(prefix="acct/", limit=2)
    settlement_batch(db)
    rest = report.scan(start=first_page[-1][0] + "\x01", prefix="acct/")
    rows = first_page + rest
    assert [key for key, _ in rows] == ACCOUNTS
    assert sum(row["balance"] for _, row in rows) == 400
    report.close()
    assert sum(row["balance"] for _, row in db.snapshot().scan(prefix="acct/")) == 400


def test_gc_keeps_exactly_what_the_oldest_snapshot_needs():
    db = Database()
    write(db, "k", 1)
    write(db, "k", 2)
    snap = db.snapshot()
    write(db, "k", 3)
    write(db, "k", 4)
    write(db, "other", 1)
    report = db.collect_garbage()
    assert report.watermark == 2
    assert report.versions_pruned == 1
    assert stamps(db, "k") == [2, 3, 4]
    assert snap.get("k") == 2


def test_closing_a_snapshot_lets_gc_reclaim_its_versions():
    db = Database()
    write(db, "k", 1)
    write(db, "k", 2)
    snap = db.snapshot()
    write(db, "k", 3)
    write(db, "k", 4)
    db.collect_garbage()
    assert snap.get("k") == 2
    snap.close()
    report = db.collect_garbage()
    assert report.watermark == 4
    assert report.versions_pruned == 2
    assert stamps(db, "k") == [4]


def test_transaction_that_has_not_written_yet_pins_its_snapshot():
    db = Database()
    write(db, "k", 1)
    txn = db.begin()
    assert txn.get("k") == 1
    write(db, "k", 2)
    write(db, "k", 3)
    db.collect_garbage()
    assert stamps(db, "k") == [1, 2, 3]
    assert txn.get("k") == 1
    txn.put("audit/k", {"seen": txn.get("k")})
    txn.commit()
    db.collect_garbage()
    assert stamps(db, "k") == [3]


def test_snapshots_at_the_same_timestamp_are_counted_separately():
    db = Database()
    write(db, "k", 1)
    first, second = db.snapshot(), db.snapshot()
    write(db, "k", 2)
    first.close()
    db.collect_garbage()
    assert second.get("k") == 1
    assert stamps(db, "k") == [1, 2]
    second.close()
    db.collect_garbage()
    assert stamps(db, "k") == [2]


def test_deleted_row_survives_while_an_old_snapshot_can_read_it():
    db = bank()
    snap = db.snapshot()
    write(db, "acct/4", None)
    report = db.collect_garbage()
    assert report.keys_removed == 0
    assert snap.get("acct/4") == {"balance": 100}
    assert [key for key, _ in snap.scan(prefix="acct/")] == ACCOUNTS
    assert db.begin().get("acct/4") is None
    snap.close()
    report = db.collect_garbage()
    assert report.keys_removed == 1
    assert db.versions("acct/4") == []


def test_watermark_follows_the_oldest_open_snapshot():
    db = Database()
    write(db, "k", 1)
    oldest = db.snapshot()
    write(db, "k", 2)
    middle = db.begin()
    write(db, "k", 3)
    assert db.collect_garbage().watermark == 1
    oldest.close()
    assert db.collect_garbage().watermark == 2
    assert stamps(db, "k") == [2, 3]
    middle.abort()
    assert db.collect_garbage().watermark == 3
    assert stamps(db, "k") == [3]


def test_finished_transactions_stop_holding_back_gc():
    db = Database()
    write(db, "k", 0)
    reader = db.snapshot()
    winner, loser, quitter = db.begin(), db.begin(), db.begin()
    winner.put("k", 1)
    loser.put("k", 2)
    quitter.get("k")
    winner.commit()
    with pytest.raises(WriteConflictError):
        loser.commit()
    quitter.abort()
    write(db, "k", 3)
    db.collect_garbage()
    assert reader.get("k") == 0
    assert stamps(db, "k") == [1, 2, 3]
    reader.close()
    report = db.collect_garbage()
    assert report.watermark == 3
    assert stamps(db, "k") == [3]


def test_service_snapshot_is_protected_until_it_is_closed():
    db = bank(gc_every=1)
    service = KVService(db)
    report = service.handle({"op": "begin", "read_only": True})["txn"]
    for amount in (10, 20, 30):
        service.handle(
            {"op": "batch", "writes": [{"op": "put", "key": "acct/1", "value": {"balance": 100 + amount}}]}
        )
    response = service.handle({"op": "get", "txn": report, "key": "acct/1"})
    assert response == {"ok": True, "found": True, "value": {"balance": 100}}
    assert service.handle({"op": "abort", "txn": report}) == {"ok": True}
    gc = service.handle({"op": "gc"})
    assert gc["watermark"] == 4
    assert gc["versions_pruned"] == 3
    assert service.handle({"op": "read", "key": "acct/1"})["value"] == {"balance": 130}
