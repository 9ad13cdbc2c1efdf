from src.engine import Database
from src.errors import StaleCursorError
from src.maintenance import run_maintenance
from src.replica import Replica
from src.service import KVService
from src.wal import MemoryStorage, WriteAheadLog

import pytest


def open_primary(storage):
    return Database(wal=WriteAheadLog(storage))


def write(db, key, value):
    with db.begin() as txn:
        if value is None:
            txn.delete(key)
        else:
            txn.put(key, value)
    return txn.commit_ts


def day_one(db):
    """Open four accounts, move money, then close two of them."""
    stamps = [write(db, f"acct/{n}", {"balance": 100}) for n in range(1, 5)]
    stamps.append(write(db, "acct/1", {"balance": 150}))
    stamps.append(write(db, "acct/3", None))
    stamps.append(write(db, "acct/4", None))
    return stamps


def test_commit_timestamps_keep_increasing_after_maintenance_and_restart():
    """Issue: "Commit timestamps must never be reused or go backwards, whatever maintenance or restarts happened in between." """
    storage = MemoryStorage()
    db = open_primary(storage)
    seen = day_one(db)
    run_maintenance(db)
    db.close()
    db = open_primary(storage)
    assert db.clock.now() == seen[-1]
    assert write(db, "acct/5", {"balance": 5}) == seen[-1] + 1
    assert db.begin().scan(prefix="acct/") == [
        ("acct/1", {"balance": 150}),
        ("acct/2", {"balance": 100}),
        ("acct/5", {"balance": 5}),
    ]


def test_timestamps_survive_compacting_an_emptied_database(tmp_path):
    """Issue: "Commit timestamps must never be reused or go backwards, whatever maintenance or restarts happened in between." """
    path = tmp_path / "wal.log"
    db = Database(path)
    write(db, "tmp/1", 1)
    write(db, "tmp/2", 2)
    write(db, "tmp/1", None)
    last = write(db, "tmp/2", None)
    run_maintenance(db)
    db.close()
    db = Database(path)
    assert db.begin().scan() == []
    assert db.stats()["last_commit_ts"] == last
    assert write(db, "tmp/3", 3) == last + 1


def test_repeated_maintenance_and_restarts_never_reuse_timestamps():
    """Issue: "Commit timestamps must never be reused or go backwards, whatever maintenance or restarts happened in between." """
    storage = MemoryStorage()
    db = open_primary(storage)
    issued = day_one(db)
    for night in range(3):
        run_maintenance(db)
        run_maintenance(db)
        db.close()
        db = open_primary(storage)
        issued.append(write(db, f"night/{night}", {"n": night}))
        issued.append(write(db, f"night/{night}", None))
    assert issued == sorted(set(issued))
    db.close()
    db = open_primary(storage)
    assert db.clock.now() == issued[-1]
    assert [key for key, _ in db.begin().scan()] == ["acct/1", "acct/2"]


def test_feed_after_restart_serves_exactly_the_commits_after_the_compaction_point():
    """Issue: "Whenever the primary cannot give a replica exactly the changes it is missing, the replica has to start over from a fresh copy rather than carry on." """
    storage = MemoryStorage()
    db = open_primary(storage)
    seen = day_one(db)
    run_maintenance(db)
    db.close()
    db = open_primary(storage)
    with pytest.raises(StaleCursorError):
        db.changes(after=seen[-2])
    ts = write(db, "acct/2", {"balance": 90})
    batch = db.changes(after=seen[-1])
    assert [(change.ts, change.key) for change in batch.changes] == [(ts, "acct/2")]


def test_up_to_date_replica_does_not_start_over_after_maintenance_and_restart():
    """Issue: "But a replica that was already up to date must not start over just because maintenance ran or the primary restarted: re-seeding our biggest replica takes hours." """
    storage = MemoryStorage()
    db = open_primary(storage)
    replica = Replica(KVService(db).handle)
    replica.sync()
    day_one(db)
    replica.sync()
    run_maintenance(db)
    db.close()
    db = open_primary(storage)
    replica.transport = KVService(db).handle
    write(db, "acct/2", {"balance": 75})
    report = replica.sync()
    assert report.seeded == 0
    assert replica.get("acct/2") == {"balance": 75}
    assert replica.rows() == dict(db.begin().scan())
    assert replica.cursor == db.clock.now()
