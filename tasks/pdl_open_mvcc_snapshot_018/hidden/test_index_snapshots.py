from src.config import DatabaseOptions
from src.engine import Database
from src.indexes import IndexSpec
from src.service import KVService

BY_BRANCH = IndexSpec("by_branch", "branch", "acct/")


def bank(path=None, gc_every=0):
    db = Database(path, options=DatabaseOptions(gc_every=gc_every), indexes=[BY_BRANCH])
    with db.begin() as txn:
        txn.put("acct/1", {"branch": "north", "balance": 10})
        txn.put("acct/2", {"branch": "south", "balance": 20})
        txn.put("acct/3", {"branch": "north", "balance": 30})
    return db


def write(db, key, value):
    with db.begin() as txn:
        if value is None:
            txn.delete(key)
        else:
            txn.put(key, value)


NORTH_AT_START = [
    ("acct/1", {"branch": "north", "balance": 10}),
    ("acct/3", {"branch": "north", "balance": 30}),
]


def test_lookup_ignores_rows_created_after_the_snapshot():
    db = bank()
    snap = db.snapshot()
    write(db, "acct/9", {"branch": "north", "balance": 90})
    assert snap.lookup("by_branch", "north") == NORTH_AT_START
    assert [key for key, _ in db.snapshot().lookup("by_branch", "north")] == ["acct/1", "acct/3", "acct/9"]


def test_lookup_returns_rows_as_they_were_at_the_snapshot():
    db = bank()
    snap = db.snapshot()
    write(db, "acct/1", {"branch": "north", "balance": 999})
    assert snap.lookup("by_branch", "north") == NORTH_AT_START
    assert db.snapshot().lookup("by_branch", "north")[0] == ("acct/1", {"branch": "north", "balance": 999})


def test_lookup_keeps_rows_that_moved_after_the_snapshot():
    db = bank()
    snap = db.snapshot()
    write(db, "acct/1", {"branch": "south", "balance": 10})
    assert snap.lookup("by_branch", "north") == NORTH_AT_START
    assert snap.lookup("by_branch", "south") == [("acct/2", {"branch": "south", "balance": 20})]
    now = db.snapshot()
    assert [key for key, _ in now.lookup("by_branch", "north")] == ["acct/3"]
    assert [key for key, _ in now.lookup("by_branch", "south")] == ["acct/1", "acct/2"]


def test_lookup_keeps_rows_deleted_after_the_snapshot():
    db = bank()
    snap = db.snapshot()
    write(db, "acct/3", None)
    assert snap.lookup("by_branch", "north") == NORTH_AT_START
    assert [key for key, _ in db.snapshot().lookup("by_branch", "north")] == ["acct/1"]


def test_lookup_combines_the_snapshot_with_own_writes():
    db = bank()
    txn = db.begin()
    write(db, "acct/9", {"branch": "north", "balance": 90})
    write(db, "acct/3", {"branch": "north", "balance": 33})
    txn.put("acct/8", {"branch": "north", "balance": 80})
    txn.delete("acct/1")
    assert txn.lookup("by_branch", "north") == [
        ("acct/3", {"branch": "north", "balance": 30}),
        ("acct/8", {"branch": "north", "balance": 80}),
    ]
    txn.commit()
    assert [key for key, _ in db.snapshot().lookup("by_branch", "north")] == ["acct/3", "acct/8", "acct/9"]


def test_lookup_at_a_snapshot_after_restart(tmp_path):
    path = tmp_path / "wal.log"
    db = bank(path)
    write(db, "acct/2", {"branch": "north", "balance": 21})
    db.close()
    reopened = Database(path, indexes=[BY_BRANCH])
    snap = reopened.snapshot()
    write(reopened, "acct/1", {"branch": "east", "balance": 10})
    write(reopened, "acct/2", None)
    assert [key for key, _ in snap.lookup("by_branch", "north")] == ["acct/1", "acct/2", "acct/3"]
    assert snap.lookup("by_branch", "east") == []
    now = reopened.snapshot()
    assert [key for key, _ in now.lookup("by_branch", "north")] == ["acct/3"]
    assert [key for key, _ in now.lookup("by_branch", "east")] == ["acct/1"]


def test_lookup_at_an_old_snapshot_survives_gc():
    db = bank(gc_every=1)
    snap = db.snapshot()
    write(db, "acct/1", {"branch": "south", "balance": 10})
    write(db, "acct/1", {"branch": "east", "balance": 10})
    write(db, "acct/3", None)
    db.collect_garbage()
    assert snap.lookup("by_branch", "north") == NORTH_AT_START
    snap.close()
    db.collect_garbage()
    now = db.snapshot()
    assert now.lookup("by_branch", "north") == []
    assert now.lookup("by_branch", "south") == [("acct/2", {"branch": "south", "balance": 20})]
    assert [key for key, _ in now.lookup("by_branch", "east")] == ["acct/1"]


def test_service_lookup_answers_as_of_the_transaction_snapshot():
    service = KVService(bank())
    report = service.handle({"op": "begin", "read_only": True})["txn"]
    service.handle(
        {"op": "batch", "writes": [{"op": "put", "key": "acct/7", "value": {"branch": "south", "balance": 70}}]}
    )
    response = service.handle({"op": "lookup", "txn": report, "index": "by_branch", "term": "south"})
    assert response["rows"] == [["acct/2", {"branch": "south", "balance": 20}]]
    service.handle({"op": "abort", "txn": report})
    fresh = service.handle({"op": "begin", "read_only": True})["txn"]
    response = service.handle({"op": "lookup", "txn": fresh, "index": "by_branch", "term": "south"})
    assert [row[0] for row in response["rows"]] == ["acct/2", "acct/7"]
