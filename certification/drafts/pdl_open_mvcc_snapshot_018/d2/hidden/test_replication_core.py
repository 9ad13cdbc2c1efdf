"""The change feed, replicas and snapshots underneath the settlement batch."""

from src.config import DatabaseOptions
from src.engine import Database
from src.maintenance import run_maintenance
from src.replica import Replica
from src.service import KVService


def write(db, key, value):
    with db.begin() as txn:
        if value is None:
            txn.delete(key)
        else:
            txn.put(key, value)
    return txn.commit_ts


def commit_keys(db, keys):
    with db.begin() as txn:
        for key in keys:
            txn.put(key, {"from": keys[0]})


def open_accounts(db, count=5):
    with db.begin() as txn:
        for n in range(1, count + 1):
            txn.put(f"acct/{n}", {"balance": 100 * n})


def primary_rows(db):
    with db.snapshot() as snap:
        return dict(snap.scan())


def test_feed_packs_as_many_whole_commits_as_fit():
    """Docs: "``limit`` caps the number of changes in a batch: the batch takes as many whole commits, oldest first, as fit in ``limit`` changes, except that a first commit larger than ``limit`` is returned whole on its own (a consumer must always be able to make progress)." """
    db = Database()
    commit_keys(db, ["a1"])
    commit_keys(db, ["b1", "b2"])
    commit_keys(db, ["c1", "c2"])
    commit_keys(db, ["d1"])
    first = db.changes(after=0, limit=4)
    assert [change.key for change in first.changes] == ["a1", "b1", "b2"]
    assert (first.cursor, first.more) == (2, True)
    second = db.changes(after=2, limit=4)
    assert [change.key for change in second.changes] == ["c1", "c2", "d1"]
    assert (second.cursor, second.more) == (4, False)


def test_feed_returns_an_oversized_first_commit_whole():
    """Docs: "``limit`` caps the number of changes in a batch: the batch takes as many whole commits, oldest first, as fit in ``limit`` changes, except that a first commit larger than ``limit`` is returned whole on its own (a consumer must always be able to make progress)." """
    db = Database()
    commit_keys(db, ["k1", "k2", "k3", "k4", "k5"])
    commit_keys(db, ["z"])
    batch = db.changes(after=0, limit=2)
    assert [change.key for change in batch.changes] == ["k1", "k2", "k3", "k4", "k5"]
    assert (batch.cursor, batch.more) == (1, True)
    rest = db.changes(after=batch.cursor, limit=2)
    assert [change.key for change in rest.changes] == ["z"]


def test_replica_down_during_maintenance_drops_closed_accounts():
    """Issue: "Whenever the primary cannot give a replica exactly the changes it is missing, the replica has to start over from a fresh copy rather than carry on." """
    db = Database()
    open_accounts(db)
    replica = Replica.of(db)
    replica.sync()
    write(db, "acct/2", None)
    write(db, "acct/4", None)
    write(db, "acct/1", {"balance": 1})
    write(db, "acct/6", {"balance": 600})
    run_maintenance(db)
    replica.sync()
    assert replica.rows() == primary_rows(db)
    assert replica.get("acct/2") is None
    assert replica.cursor == db.clock.now()


def test_service_refuses_a_cursor_ahead_of_the_primary():
    """Docs: "A cursor is refused when the feed could not give *exactly* the changes committed after it." """
    db = Database()
    open_accounts(db)
    write(db, "acct/1", None)
    service = KVService(db)
    assert service.handle({"op": "changes", "after": 2})["ok"] is True
    response = service.handle({"op": "changes", "after": 5})
    assert response["ok"] is False
    assert response["error"] == "stale_cursor"
    assert response["latest"] == 2


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
    assert [version.commit_ts for version in db.versions("k")] == [3]
