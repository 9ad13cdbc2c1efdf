"""Settlement runs: chunks, conflicts, interruptions and repeats (docs/settlement.md)."""

import pytest

from src.engine import Database
from src.errors import WriteConflictError
from src.maintenance import run_maintenance

RUN_DATE = "2024-03-01"


def account(balance, currency="EUR", **extra):
    row = {"currency": currency, "balance": balance}
    row.update(extra)
    return row


def open_ledger(db, rows):
    with db.begin() as txn:
        for key, row in rows.items():
            txn.put(key, row)
    return db


def ins(id, payer, payee, amount, hour=9, minute=0, priority=0):
    from src.settlement import Instruction

    return Instruction(
        id=id, payer=payer, payee=payee, amount=amount, currency="EUR",
        submitted_at=f"2024-03-01T{hour:02d}:{minute:02d}:00+00:00", priority=priority,
    )


def run(db, instructions, run_id="r1", **kwargs):
    from src.settlement import settle

    return settle(db, run_id, RUN_DATE, instructions, **kwargs)


def balances(db):
    with db.snapshot() as snap:
        return {key: row["balance"] for key, row in snap.scan(prefix="acct/")}


def markers(db):
    with db.snapshot() as snap:
        return sorted(key for key, _ in snap.scan(prefix="settled/"))


ACCOUNTS = {f"acct/{n}": account(10000) for n in range(1, 5)}
ACCOUNTS["acct/poor"] = account(0)


def day_batch():
    """Ten instructions: settled, rejected and deferred ones mixed."""
    return [
        ins("t01", "acct/1", "acct/2", "10.00", 8),
        ins("t02", "acct/poor", "acct/1", "1.00", 8, 30),
        ins("t03", "acct/2", "acct/3", "25.50", 9),
        ins("t04", "acct/3", "acct/4", "5.00", 18),
        ins("t05", "acct/4", "acct/1", "12.34", 10),
        ins("t06", "acct/1", "acct/1", "1.00", 10, 30),
        ins("t07", "acct/3", "acct/2", "99.99", 11),
        ins("t08", "acct/2", "acct/poor", "20.00", 12),
        ins("t09", "acct/poor", "acct/3", "20.00", 13),
        ins("t10", "acct/4", "acct/2", "0.01", 14),
    ]


def test_each_chunk_is_one_commit_whatever_its_instructions_did():
    """Docs: "processed in chunks of `chunk_size` consecutive instructions; deferred and rejected instructions count towards a chunk like settled ones. Each chunk is one transaction and one commit" and "A chunk is committed even if none of its instructions settled." """
    db = open_ledger(Database(), ACCOUNTS)
    before = db.clock.now()
    report = run(db, [
        ins("s1", "acct/1", "acct/2", "1.00", 8),
        ins("r1", "acct/poor", "acct/2", "1.00", 9),
        ins("d1", "acct/1", "acct/2", "1.00", 18),
        ins("s2", "acct/2", "acct/3", "1.00", 10),
        ins("s3", "acct/3", "acct/4", "1.00", 11),
        ins("r2", "acct/1", "acct/1", "1.00", 12),
        ins("r3", "acct/poor", "acct/1", "1.00", 13),
    ], chunk_size=2)
    assert report.chunks == 4
    commits = db.changes(after=before).commits()
    assert len(commits) == 4
    assert db.clock.now() == before + 4
    settled_in = [sorted(c.key for c in changes if c.key.startswith("settled/")) for _, changes in commits]
    assert settled_in == [["settled/s1"], ["settled/s2", "settled/s3"], [], []]


def test_a_run_without_instructions_commits_nothing():
    """Docs: "A run with no instructions commits nothing." and "`chunks`: the number of chunks the run committed." """
    db = open_ledger(Database(), ACCOUNTS)
    before = db.clock.now()
    report = run(db, [])
    assert (report.settled, report.rejected, report.deferred, report.totals, report.chunks) == ((), (), (), {}, 0)
    assert db.clock.now() == before


def test_a_refused_chunk_is_evaluated_again_against_the_current_balances():
    """Docs: "If a chunk's commit is refused with `WriteConflictError` (someone else wrote one of its accounts meanwhile), the chunk is evaluated again from the start, against the balances as they are now, and committed again." and "`index` counts the run's chunks from 0 and `attempt` a chunk's attempts from 1" """
    db = open_ledger(Database(), ACCOUNTS)
    calls = []

    def branch_withdrawal(index, attempt):
        calls.append((index, attempt))
        if (index, attempt) == (0, 1):
            with db.begin() as txn:
                txn.put("acct/1", account(5000))

    report = run(db, [
        ins("big", "acct/1", "acct/2", "80.00", 9),
        ins("small", "acct/1", "acct/3", "20.00", 10),
    ], on_chunk=branch_withdrawal)
    assert calls == [(0, 1), (0, 2)]
    assert report.settled == ("small",)
    assert report.rejected == (("big", "insufficient_funds"),)
    assert report.chunks == 1
    assert balances(db)["acct/1"] == 3000
    assert markers(db) == ["settled/small"]


def test_the_third_refusal_raises_and_the_run_continues_later():
    """Docs: "A chunk gets at most 3 attempts; if the third is refused as well, `settle` raises that `WriteConflictError`." and "Calling `settle` again for a run that stopped part way (an exception, a refused chunk, a crash, a restart of the database, maintenance in between) continues with the first chunk that was not committed." """
    db = open_ledger(Database(), ACCOUNTS)
    batch = [
        ins("a", "acct/1", "acct/2", "1.00", 9),
        ins("b", "acct/2", "acct/3", "1.00", 10),
        ins("c", "acct/3", "acct/4", "1.00", 11),
    ]
    calls = []

    def busy_branch(index, attempt):
        calls.append((index, attempt))
        if index == 1:
            with db.begin() as txn:
                txn.put("acct/3", account(10000 + attempt))

    with pytest.raises(WriteConflictError):
        run(db, batch, chunk_size=1, on_chunk=busy_branch)
    assert calls == [(0, 1), (1, 1), (1, 2), (1, 3)]
    assert markers(db) == ["settled/a"]
    calls.clear()
    report = run(db, batch, chunk_size=1, on_chunk=lambda index, attempt: calls.append((index, attempt)))
    assert calls == [(1, 1), (2, 1)]
    assert report.settled == ("a", "b", "c")
    assert report.chunks == 3
    assert balances(db) == {"acct/1": 9900, "acct/2": 10000, "acct/3": 10003, "acct/4": 10100, "acct/poor": 0}


def test_a_hook_that_raises_leaves_its_chunk_uncommitted():
    """Docs: "If it raises, the chunk is not committed and the exception propagates out of `settle`." and "The chunks already committed are not evaluated again; the chunks after them are evaluated when the run continues, against the balances as they are then." """
    db = open_ledger(Database(), ACCOUNTS)

    def crash(index, attempt):
        if index == 2:
            raise RuntimeError("power cut")

    with pytest.raises(RuntimeError):
        run(db, day_batch(), chunk_size=3, on_chunk=crash)
    assert markers(db) == ["settled/t01", "settled/t03", "settled/t05", "settled/t07"]
    with db.begin() as txn:
        txn.put("acct/4", account(0))
    report = run(db, day_batch(), chunk_size=3)
    assert report.settled == ("t01", "t03", "t05", "t07", "t08", "t09")
    assert report.rejected == (("t02", "insufficient_funds"), ("t06", "same_account"), ("t10", "insufficient_funds"))
    assert report.deferred == ("t04",)


def test_a_resumed_run_reports_what_an_uninterrupted_run_reports(tmp_path):
    """Docs: "The final report covers the whole run, the chunks committed before the interruption included, exactly as one uninterrupted run would have reported them." and "Everything a run needs to continue lives in the database, so it survives restarts and maintenance like any other row." """
    from src.settlement import FeeSchedule

    fees = FeeSchedule(bps=30, minimum={"EUR": 5})
    reference_db = open_ledger(Database(), ACCOUNTS)
    reference = run(reference_db, day_batch(), chunk_size=3, fees=fees)

    path = tmp_path / "ledger.log"
    db = open_ledger(Database(path), ACCOUNTS)

    def crash(index, attempt):
        if index == 2:
            raise RuntimeError("power cut")

    with pytest.raises(RuntimeError):
        run(db, day_batch(), chunk_size=3, fees=fees, on_chunk=crash)
    db.close()
    db = Database(path)
    resumed = run(db, list(reversed(day_batch())), chunk_size=3, fees=fees)
    assert resumed == reference
    assert resumed.chunks == 4
    assert resumed.totals == {"EUR": {"count": 6, "amount": "167.84", "fees": "0.59"}}
    assert balances(db) == balances(reference_db)


def test_a_completed_run_returns_its_report_and_commits_nothing():
    """Docs: "Calling `settle` for a run that has completed returns its report again and commits nothing." and "The instructions are compared as a collection: the same instructions in another order are the same run." """
    db = open_ledger(Database(), ACCOUNTS)
    first = run(db, day_batch(), chunk_size=4)
    after = db.clock.now()
    shuffled = day_batch()[5:] + day_batch()[:5]
    calls = []
    again = run(db, shuffled, chunk_size=4, on_chunk=lambda *args: calls.append(args))
    assert again == first
    assert calls == []
    assert db.clock.now() == after
    assert first.chunks == 3


def test_a_known_run_with_other_parameters_is_refused():
    """Docs: "Its parameters (business date, instructions, fee schedule, cutoff, UTC offset and chunk size) are recorded with its first chunk." and "Calling `settle` with a known run id but different parameters raises `SettlementMismatchError` and commits nothing." """
    from src.settlement import FeeSchedule, SettlementMismatchError, settle

    db = open_ledger(Database(), ACCOUNTS)
    run(db, day_batch(), chunk_size=4)
    after = db.clock.now()
    changed = day_batch()
    changed[0] = ins("t01", "acct/1", "acct/2", "10.01", 8)
    attempts = [
        lambda: run(db, changed, chunk_size=4),
        lambda: run(db, day_batch()[:-1], chunk_size=4),
        lambda: run(db, day_batch(), chunk_size=5),
        lambda: run(db, day_batch(), chunk_size=4, utc_offset="+01:00"),
        lambda: run(db, day_batch(), chunk_size=4, cutoff="18:00"),
        lambda: run(db, day_batch(), chunk_size=4, fees=FeeSchedule(bps=1)),
        lambda: settle(db, "r1", "2024-03-02", day_batch(), chunk_size=4),
    ]
    for attempt in attempts:
        with pytest.raises(SettlementMismatchError):
            attempt()
    assert db.clock.now() == after


def test_an_interrupted_run_refuses_other_parameters_too():
    """Docs: "Calling `settle` with a known run id but different parameters raises `SettlementMismatchError` and commits nothing." and "Its parameters (business date, instructions, fee schedule, cutoff, UTC offset and chunk size) are recorded with its first chunk." """
    from src.settlement import FeeSchedule, SettlementMismatchError

    db = open_ledger(Database(), ACCOUNTS)

    def crash(index, attempt):
        if index == 1:
            raise RuntimeError("power cut")

    with pytest.raises(RuntimeError):
        run(db, day_batch(), chunk_size=3, on_chunk=crash)
    after = db.clock.now()
    with pytest.raises(SettlementMismatchError):
        run(db, day_batch(), chunk_size=3, fees=FeeSchedule(minimum={"EUR": 1}))
    assert db.clock.now() == after
    report = run(db, day_batch(), chunk_size=3)
    assert report.chunks == 4


def test_a_run_interrupted_before_its_first_chunk_starts_afresh():
    """Docs: "Its parameters (business date, instructions, fee schedule, cutoff, UTC offset and chunk size) are recorded with its first chunk." and "If it raises, the chunk is not committed and the exception propagates out of `settle`." """
    db = open_ledger(Database(), ACCOUNTS)

    def crash(index, attempt):
        raise RuntimeError("power cut")

    with pytest.raises(RuntimeError):
        run(db, day_batch(), chunk_size=3, on_chunk=crash)
    assert markers(db) == []
    report = run(db, day_batch()[:3], chunk_size=2)
    assert report.settled == ("t01", "t03")
    assert report.chunks == 2


def test_a_run_continues_after_maintenance_and_a_restart_without_settling_twice():
    """Docs: "Calling `settle` again for a run that stopped part way (an exception, a refused chunk, a crash, a restart of the database, maintenance in between) continues with the first chunk that was not committed." and "`duplicate`: an instruction with the same `id` was already settled, by an earlier run or earlier in this run." """
    from src.wal import MemoryStorage, WriteAheadLog

    storage = MemoryStorage()
    db = open_ledger(Database(wal=WriteAheadLog(storage)), ACCOUNTS)
    batch = day_batch() + [ins("t01", "acct/1", "acct/2", "10.00", 15)]

    def crash(index, attempt):
        if index == 2:
            raise RuntimeError("power cut")

    with pytest.raises(RuntimeError):
        run(db, batch, chunk_size=4, on_chunk=crash)
    run_maintenance(db)
    db.close()
    db = Database(wal=WriteAheadLog(storage))
    report = run(db, batch, chunk_size=4)
    assert report.settled == ("t01", "t03", "t05", "t07", "t08", "t09", "t10")
    assert report.rejected == (("t02", "insufficient_funds"), ("t06", "same_account"), ("t01", "duplicate"))
    assert report.deferred == ("t04",)
    assert report.chunks == 3
    assert balances(db) == {"acct/1": 10000 - 1000 + 1234, "acct/2": 10000 - 2550 + 1000 + 9999 - 2000 + 1,
                            "acct/3": 10000 + 2550 - 9999 + 2000, "acct/4": 10000 - 1234 - 1, "acct/poor": 0}
