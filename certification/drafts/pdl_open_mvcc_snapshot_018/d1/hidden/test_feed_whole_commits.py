from src.engine import Database
from src.replica import Replica
from src.service import KVService

ACCOUNTS = [f"acct/{n}" for n in range(1, 9)]


def bank():
    db = Database()
    with db.begin() as txn:
        for key in ACCOUNTS:
            txn.put(key, {"balance": 100})
    return db


def settlement(db, amount=10):
    """One settlement commit: every account pays the next one."""
    with db.begin() as txn:
        balances = {key: txn.get(key)["balance"] for key in ACCOUNTS}
        for index, key in enumerate(ACCOUNTS):
            payee = ACCOUNTS[(index + 1) % len(ACCOUNTS)]
            balances[key] -= amount * (index + 1)
            balances[payee] += amount * (index + 1)
        for key, balance in balances.items():
            txn.put(key, {"balance": balance})


def commit_keys(db, keys):
    with db.begin() as txn:
        for key in keys:
            txn.put(key, {"from": keys[0]})


def primary_rows(db):
    with db.snapshot() as snap:
        return dict(snap.scan())


def test_large_commit_reaches_the_replica_whole():
    """Issue: "Once `sync()` returns, the replica must hold exactly the primary's rows as of its cursor, and the cursor must have caught up with the primary's newest commit." """
    db = bank()
    replica = Replica.of(db, batch_size=3)
    replica.sync()
    with db.begin() as txn:
        for n in range(20):
            txn.put(f"posting/{n:03d}", {"amount": n})
    replica.sync()
    assert replica.rows() == primary_rows(db)
    assert replica.cursor == db.clock.now()


def test_replica_readers_never_see_half_a_settlement():
    """Issue: "Readers of a replica must never see part of a primary commit, however large the commit and whatever `batch_size` the replica uses." """
    db = bank()
    replica = Replica.of(db, batch_size=3)
    replica.sync()
    settlement(db)
    settlement(db, amount=1)
    totals = []
    for _ in range(20):
        step = replica.sync_once()
        with replica.snapshot() as view:
            totals.append(sum(row["balance"] for _, row in view.scan(prefix="acct/")))
        if not step.more:
            break
    assert set(totals) == {800}
    assert replica.rows() == primary_rows(db)


def test_feed_batch_never_splits_a_commit():
    """Docs: "Batches hold whole commits." """
    db = Database()
    commit_keys(db, ["a1", "a2"])
    commit_keys(db, ["b1", "b2"])
    first = db.changes(after=0, limit=3)
    assert [change.key for change in first.changes] == ["a1", "a2"]
    assert first.cursor == 1
    assert first.more is True
    second = db.changes(after=first.cursor, limit=3)
    assert [change.key for change in second.changes] == ["b1", "b2"]
    assert second.cursor == 2
    assert second.more is False


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


def test_service_changes_op_keeps_commits_whole():
    """Docs: "Batches hold whole commits." """
    db = Database()
    service = KVService(db)
    commit_keys(db, ["a1", "a2", "a3"])
    commit_keys(db, ["b1"])
    response = service.handle({"op": "changes", "after": 0, "limit": 2})
    assert [change["key"] for change in response["changes"]] == ["a1", "a2", "a3"]
    assert response["cursor"] == 1
    assert response["more"] is True
