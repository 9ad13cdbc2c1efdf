from src.engine import Database
from src.maintenance import run_maintenance
from src.replica import Replica
from src.service import KVService
from src.wal import MemoryStorage, WriteAheadLog


def open_primary(storage):
    return Database(wal=WriteAheadLog(storage))


def write(db, key, value):
    with db.begin() as txn:
        if value is None:
            txn.delete(key)
        else:
            txn.put(key, value)
    return txn.commit_ts


def open_accounts(db, count=5):
    with db.begin() as txn:
        for n in range(1, count + 1):
            txn.put(f"acct/{n}", {"balance": 100 * n})


def primary_rows(db):
    with db.snapshot() as snap:
        return dict(snap.scan())


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


def test_replica_behind_only_by_a_collected_closure_catches_up():
    """Issue: "Once `sync()` returns, the replica must hold exactly the primary's rows as of its cursor, and the cursor must have caught up with the primary's newest commit." """
    db = Database()
    open_accounts(db)
    write(db, "acct/1", {"balance": 7})
    replica = Replica.of(db)
    replica.sync()
    write(db, "acct/5", None)
    run_maintenance(db)
    replica.sync()
    assert replica.get("acct/5") is None
    assert replica.rows() == primary_rows(db)


def test_replica_starts_over_after_primary_maintenance_and_restart():
    """Issue: "Whenever the primary cannot give a replica exactly the changes it is missing, the replica has to start over from a fresh copy rather than carry on." """
    storage = MemoryStorage()
    db = open_primary(storage)
    open_accounts(db)
    replica = Replica(KVService(db).handle, batch_size=2)
    replica.sync()
    write(db, "acct/3", None)
    write(db, "acct/2", {"balance": 250})
    write(db, "acct/4", None)
    run_maintenance(db)
    db.close()
    db = open_primary(storage)
    replica.transport = KVService(db).handle
    replica.sync()
    assert replica.rows() == primary_rows(db)
    write(db, "acct/7", {"balance": 700})
    replica.sync()
    assert replica.rows() == primary_rows(db)
    assert replica.cursor == db.clock.now()


def test_replica_ahead_of_a_restored_primary_starts_over():
    """Issue: "Whenever the primary cannot give a replica exactly the changes it is missing, the replica has to start over from a fresh copy rather than carry on." """
    storage = MemoryStorage()
    db = open_primary(storage)
    open_accounts(db)
    backup = storage.read_all()
    replica = Replica(KVService(db).handle)
    replica.sync()
    write(db, "acct/9", {"balance": 900})
    write(db, "acct/2", None)
    replica.sync()
    db.close()
    restored = open_primary(MemoryStorage(backup))
    replica.transport = KVService(restored).handle
    replica.sync()
    assert replica.rows() == primary_rows(restored)
    assert replica.get("acct/9") is None


def test_replica_follows_a_restored_primary_after_starting_over():
    """Issue: "Once `sync()` returns, the replica must hold exactly the primary's rows as of its cursor, and the cursor must have caught up with the primary's newest commit." """
    storage = MemoryStorage()
    db = open_primary(storage)
    open_accounts(db, 3)
    backup = storage.read_all()
    replica = Replica(KVService(db).handle)
    replica.sync()
    for n in range(3):
        write(db, f"late/{n}", {"n": n})
    replica.sync()
    restored = open_primary(MemoryStorage(backup))
    replica.transport = KVService(restored).handle
    replica.sync()
    write(restored, "acct/1", {"balance": 11})
    write(restored, "fresh/1", {"n": 1})
    replica.sync()
    assert replica.rows() == primary_rows(restored)
    assert replica.cursor == restored.clock.now()


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


def test_readers_keep_the_old_copy_while_the_replica_starts_over():
    """Issue: "While a replica starts over, its readers must keep seeing its previous copy until the new copy is complete." """
    db = Database()
    open_accounts(db)
    service = KVService(db)
    seen_while_copying = []
    replica = None

    def transport(request):
        if request.get("op") == "scan" and replica is not None and replica.cursor is not None:
            seen_while_copying.append(replica.rows())
        return service.handle(request)

    replica = Replica(transport, page_size=2)
    replica.sync()
    before = replica.rows()
    write(db, "acct/2", None)
    write(db, "acct/1", {"balance": 1})
    run_maintenance(db)
    replica.sync()
    assert seen_while_copying
    assert all(rows == before for rows in seen_while_copying)
    assert replica.rows() == primary_rows(db)
