import itertools

import pytest

from src.config import DatabaseOptions
from src.engine import Database
from src.errors import WriteConflictError
from src.replica import Replica
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


MOVES = [("acct/1", "acct/2", 10), ("acct/3", "acct/4", 25), ("acct/2", "acct/3", 5)]


def settlement_batch(db, rounds=3):
    for _ in range(rounds):
        for move in MOVES:
            transfer(db, *move)


def busy_transport(db):
    """The primary's service, with one settlement transfer committing after every page a replica reads."""
    service = KVService(db)
    moves = itertools.cycle(MOVES)

    def transport(request):
        response = service.handle(request)
        if request.get("op") == "scan":
            transfer(db, *next(moves))
        return response

    return transport


def write(db, key, value):
    with db.begin() as txn:
        if value is None:
            txn.delete(key)
        else:
            txn.put(key, value)


def stamps(db, key):
    return [version.commit_ts for version in db.versions(key)]


def primary_rows(db):
    with db.snapshot() as snap:
        return dict(snap.scan())


def test_replica_seeded_during_the_batch_copies_one_consistent_snapshot():
    """Issue: "A replica's copy must be the primary as it was at one moment, even while the batch keeps committing." """
    db = bank(gc_every=1)
    replica = Replica(busy_transport(db), page_size=1)
    replica.sync_once()
    rows = replica.rows()
    assert sorted(rows) == ACCOUNTS
    assert sum(row["balance"] for row in rows.values()) == 400


def test_transfers_committed_while_seeding_reach_the_replica():
    """Issue: "Once `sync()` returns, the replica must hold exactly the primary's rows as of its cursor, and the cursor must have caught up with the primary's newest commit." """
    db = bank()
    replica = Replica(busy_transport(db), page_size=1)
    replica.sync()
    assert replica.cursor == db.clock.now()
    assert replica.rows() == primary_rows(db)


def test_seeding_during_the_batch_with_automatic_gc_matches_the_primary():
    """Issue: "Once `sync()` returns, the replica must hold exactly the primary's rows as of its cursor, and the cursor must have caught up with the primary's newest commit." """
    db = bank(gc_every=2)
    replica = Replica(busy_transport(db), page_size=2)
    replica.sync()
    assert replica.rows() == primary_rows(db)
    settlement_batch(db, rounds=1)
    replica.sync()
    assert replica.rows() == primary_rows(db)


def test_report_snapshot_total_is_stable_while_the_batch_commits():
    """Docs: "A transaction, read-only or not, sees the database as of the moment it began plus its own writes, for as long as it is open." """
    db = bank(gc_every=2)
    report = db.snapshot()
    first_page = report.scan(prefix="acct/", limit=2)
    settlement_batch(db)
    rest = report.scan(start=first_page[-1][0] + "\x01", prefix="acct/")
    rows = first_page + rest
    assert [key for key, _ in rows] == ACCOUNTS
    assert sum(row["balance"] for _, row in rows) == 400
    report.close()


def test_transaction_that_has_not_written_yet_keeps_its_snapshot():
    """Docs: "A transaction, read-only or not, sees the database as of the moment it began plus its own writes, for as long as it is open." """
    db = Database(options=DatabaseOptions(gc_every=1))
    write(db, "k", 1)
    txn = db.begin()
    assert txn.get("k") == 1
    write(db, "k", 2)
    write(db, "k", 3)
    assert txn.get("k") == 1
    txn.put("audit/k", {"seen": txn.get("k")})
    txn.commit()
    db.collect_garbage()
    assert stamps(db, "k") == [3]


def test_gc_watermark_is_the_oldest_open_snapshot():
    """Docs: "A collection is given a *watermark*: the oldest timestamp at which any reader may still read." """
    db = Database()
    write(db, "k", 1)
    oldest = db.snapshot()
    write(db, "k", 2)
    middle = db.begin()
    write(db, "k", 3)
    assert db.collect_garbage().watermark == 1
    assert stamps(db, "k") == [1, 2, 3]
    oldest.close()
    assert db.collect_garbage().watermark == 2
    assert stamps(db, "k") == [2, 3]
    middle.abort()
    assert db.collect_garbage().watermark == 3
    assert stamps(db, "k") == [3]


def test_finished_transactions_stop_holding_back_gc():
    """Docs: "It is open until it commits, aborts or is closed (`close()`, leaving a `with` block, a service handle being committed or aborted, a commit refused with a conflict)." """
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


def test_snapshots_at_the_same_timestamp_are_each_kept_until_closed():
    """Docs: "A transaction, read-only or not, sees the database as of the moment it began plus its own writes, for as long as it is open." """
    db = Database()
    write(db, "k", 1)
    first, second = db.snapshot(), db.snapshot()
    write(db, "k", 2)
    first.close()
    db.collect_garbage()
    assert second.get("k") == 1
    second.close()
    db.collect_garbage()
    assert stamps(db, "k") == [2]


def test_closed_account_stays_visible_to_an_older_snapshot():
    """Docs: "A transaction, read-only or not, sees the database as of the moment it began plus its own writes, for as long as it is open." """
    db = bank()
    snap = db.snapshot()
    write(db, "acct/4", None)
    report = db.collect_garbage()
    assert report.keys_removed == 0
    assert snap.get("acct/4") == {"balance": 100}
    assert [key for key, _ in snap.scan(prefix="acct/")] == ACCOUNTS
    snap.close()
    report = db.collect_garbage()
    assert report.keys_removed == 1
    assert db.versions("acct/4") == []


def test_service_snapshot_handle_is_protected_until_it_is_closed():
    """Docs: "It is open until it commits, aborts or is closed (`close()`, leaving a `with` block, a service handle being committed or aborted, a commit refused with a conflict)." """
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


def test_index_lookup_at_an_old_snapshot_survives_gc():
    """Docs: "A transaction, read-only or not, sees the database as of the moment it began plus its own writes, for as long as it is open." """
    from src.indexes import IndexSpec

    db = Database(options=DatabaseOptions(gc_every=1), indexes=[IndexSpec("by_branch", "branch", "acct/")])
    with db.begin() as txn:
        txn.put("acct/1", {"branch": "north", "balance": 10})
        txn.put("acct/2", {"branch": "south", "balance": 20})
        txn.put("acct/3", {"branch": "north", "balance": 30})
    snap = db.snapshot()
    write(db, "acct/1", {"branch": "south", "balance": 10})
    write(db, "acct/3", None)
    db.collect_garbage()
    assert snap.lookup("by_branch", "north") == [
        ("acct/1", {"branch": "north", "balance": 10}),
        ("acct/3", {"branch": "north", "balance": 30}),
    ]
    snap.close()
    db.collect_garbage()
    with db.snapshot() as now:
        assert now.lookup("by_branch", "north") == []
        assert [key for key, _ in now.lookup("by_branch", "south")] == ["acct/1", "acct/2"]
