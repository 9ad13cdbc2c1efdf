"""Settlement runs together with snapshots, replicas, maintenance and restarts."""

from src.config import DatabaseOptions
from src.engine import Database
from src.maintenance import run_maintenance
from src.replica import Replica
from src.service import KVService
from src.wal import MemoryStorage, WriteAheadLog

RUN_DATE = "2024-03-01"
KEYS = [f"acct/{n:02d}" for n in range(1, 11)]


def open_ledger(db, balance=10000):
    with db.begin() as txn:
        for key in KEYS:
            txn.put(key, {"currency": "EUR", "balance": balance})
    return db


def ins(id, payer, payee, amount, minute=0):
    from src.settlement import Instruction

    return Instruction(id=id, payer=payer, payee=payee, amount=amount, currency="EUR",
                       submitted_at=f"2024-03-01T09:{minute:02d}:00Z")


def ring(prefix, count=40):
    """``count`` transfers, each account paying the next one."""
    return [
        ins(f"{prefix}{n:03d}", KEYS[n % len(KEYS)], KEYS[(n + 1) % len(KEYS)], f"{n + 1}.00", n % 60)
        for n in range(count)
    ]


def run(db, instructions, run_id="r1", **kwargs):
    from src.settlement import settle

    return settle(db, run_id, RUN_DATE, instructions, **kwargs)


def rows(db):
    with db.snapshot() as snap:
        return dict(snap.scan())


def total(found):
    return sum(row["balance"] for key, row in found.items() if key.startswith("acct/"))


def test_replica_readers_see_each_settlement_chunk_whole():
    """Docs: "Each chunk is one transaction and one commit" and "A reader, on the primary or on a replica, therefore sees a chunk's transfers all or none." """
    db = open_ledger(Database())
    replica = Replica.of(db, batch_size=7)
    replica.sync()
    run(db, ring("a"), chunk_size=20)
    seen = []
    for _ in range(50):
        step = replica.sync_once()
        found = replica.rows()
        seen.append(sum(1 for key in found if key.startswith("settled/")))
        assert total(found) == 100000
        if not step.more:
            break
    assert set(seen) <= {0, 20, 40}
    assert seen[-1] == 40
    assert replica.rows() == rows(db)


def test_a_report_snapshot_opened_before_the_run_keeps_its_balances():
    """Docs: "A transaction, read-only or not, sees the database as of the moment it began plus its own writes, for as long as it is open." and "Housekeeping never changes what a reader sees." """
    db = open_ledger(Database(options=DatabaseOptions(gc_every=1)))
    before = rows(db)
    report = db.snapshot()
    run(db, ring("b", 12), chunk_size=2)
    assert dict(report.scan(prefix="acct/")) == before
    assert report.get("settled/b000") is None
    report.close()
    assert total(rows(db)) == 100000


def test_transfers_settled_while_a_replica_is_seeded_reach_it():
    """Issue: "Once `sync()` returns, the replica must hold exactly the primary's rows as of its cursor, and the cursor must have caught up with the primary's newest commit." and Docs: "Each chunk is one transaction and one commit" """
    db = open_ledger(Database(options=DatabaseOptions(gc_every=3)))
    service = KVService(db)
    batches = iter(range(100))

    def busy(request):
        response = service.handle(request)
        if request.get("op") == "scan":
            n = next(batches)
            run(db, ring(f"s{n}-", 4), run_id=f"seed-{n}", chunk_size=2)
        return response

    replica = Replica(busy, page_size=3)
    replica.sync()
    assert replica.cursor == db.clock.now()
    assert replica.rows() == rows(db)
    assert total(replica.rows()) == 100000


def test_an_up_to_date_replica_receives_a_run_resumed_after_closures_maintenance_and_restart():
    """Docs: "each one is issued once, and a commit always gets a higher timestamp than every commit before it, across restarts and log compactions alike." and "Everything a run needs to continue lives in the database, so it survives restarts and maintenance like any other row." and Issue: "But a replica that was already up to date must not start over just because maintenance ran or the primary restarted" """
    storage = MemoryStorage()
    db = open_ledger(Database(wal=WriteAheadLog(storage)))
    service = KVService(db)
    batch = ring("c", 30)

    def crash(index, attempt):
        if index == 1:
            raise RuntimeError("power cut")

    try:
        run(db, batch, chunk_size=10, on_chunk=crash)
    except RuntimeError:
        pass
    with db.begin() as txn:
        txn.put("acct/99", {"currency": "EUR", "balance": 0, "closed": True})
    with db.begin() as txn:
        txn.delete("acct/99")
    replica = Replica(lambda request: service.handle(request))
    replica.sync()
    last = db.clock.now()
    run_maintenance(db)
    db.close()

    db = Database(wal=WriteAheadLog(storage))
    service = KVService(db)
    report = run(db, batch, chunk_size=10)
    assert report.chunks == 3
    assert [ts for ts, _ in db.changes(after=last).commits()] == [last + 1, last + 2]
    replica.sync()
    assert replica.seed_count == 1
    assert replica.rows() == rows(db)
    assert len([key for key in replica.rows() if key.startswith("settled/")]) == 30


def test_the_first_run_after_closures_maintenance_and_restart_gets_new_timestamps():
    """Docs: "each one is issued once, and a commit always gets a higher timestamp than every commit before it, across restarts and log compactions alike." and "Each chunk is one transaction and one commit" """
    storage = MemoryStorage()
    db = open_ledger(Database(wal=WriteAheadLog(storage)))
    run(db, ring("d", 10), run_id="day1", chunk_size=5)
    with db.begin() as txn:
        txn.delete("acct/10")
        txn.delete("acct/09")
    last = db.clock.now()
    run_maintenance(db)
    db.close()
    db = Database(wal=WriteAheadLog(storage))
    report = run(db, ring("e", 6)[:6], run_id="day2", chunk_size=2)
    assert report.chunks == 3
    stamps = [ts for ts, _ in db.changes(after=last).commits()]
    assert stamps == [last + 1, last + 2, last + 3]
