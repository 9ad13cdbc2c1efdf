import pytest

from src.engine import Database
from src.errors import WriteConflictError
from src.service import KVService
from src.transaction import TxnState


def ledger(path=None):
    db = Database(path)
    with db.begin() as txn:
        txn.put("acct/1", {"balance": 100})
        txn.put("acct/2", {"balance": 200})
    return db


def test_delete_conflicts_with_a_concurrent_update():
    db = ledger()
    closer = db.begin()
    closer.delete("acct/1")
    with db.begin() as deposit:
        deposit.put("acct/1", {"balance": 150})
    with pytest.raises(WriteConflictError) as info:
        closer.commit()
    assert info.value.keys == ("acct/1",)
    assert closer.state is TxnState.ABORTED
    assert db.begin().get("acct/1") == {"balance": 150}


def test_update_conflicts_with_a_concurrent_delete():
    db = ledger()
    deposit = db.begin()
    balance = deposit.get("acct/1")["balance"]
    with db.begin() as closer:
        closer.delete("acct/1")
    deposit.put("acct/1", {"balance": balance + 50})
    with pytest.raises(WriteConflictError) as info:
        deposit.commit()
    assert info.value.keys == ("acct/1",)
    assert db.begin().get("acct/1") is None


def test_concurrent_deletes_conflict():
    db = ledger()
    first, second = db.begin(), db.begin()
    first.delete("acct/2")
    second.delete("acct/2")
    first.commit()
    with pytest.raises(WriteConflictError):
        second.commit()
    assert [v.is_tombstone for v in db.versions("acct/2")] == [False, True]


def test_insert_conflicts_with_a_key_created_and_deleted_meanwhile():
    db = ledger()
    late = db.begin()
    with db.begin() as txn:
        txn.put("acct/3", {"balance": 1})
    with db.begin() as txn:
        txn.delete("acct/3")
    late.put("acct/3", {"balance": 3})
    with pytest.raises(WriteConflictError):
        late.commit()
    assert db.begin().get("acct/3") is None


def test_mixed_write_set_reports_every_conflicting_key():
    db = ledger()
    mine = db.begin()
    mine.put("acct/1", {"balance": 1})
    mine.delete("acct/2")
    mine.put("acct/9", {"balance": 9})
    with db.begin() as theirs:
        theirs.delete("acct/1")
        theirs.put("acct/2", {"balance": 222})
    with pytest.raises(WriteConflictError) as info:
        mine.commit()
    assert info.value.keys == ("acct/1", "acct/2")
    after = db.begin()
    assert after.get("acct/1") is None
    assert after.get("acct/2") == {"balance": 222}
    assert after.get("acct/9") is None


def test_rejected_delete_is_not_in_the_log(tmp_path):
    path = tmp_path / "wal.log"
    db = ledger(path)
    closer = db.begin()
    closer.delete("acct/1")
    with db.begin() as deposit:
        deposit.put("acct/1", {"balance": 150})
    with pytest.raises(WriteConflictError):
        closer.commit()
    db.close()
    reopened = Database(path)
    assert reopened.recovery.records == 2
    assert reopened.begin().get("acct/1") == {"balance": 150}


def test_only_transactions_that_touch_the_same_key_abort():
    db = ledger()
    closer = db.begin()
    closer.delete("acct/1")
    unrelated = db.begin()
    unrelated.put("acct/2", {"balance": 201})
    deposit = db.begin()
    deposit.put("acct/1", {"balance": 101})
    deposit.commit()
    unrelated.commit()
    with pytest.raises(WriteConflictError):
        closer.commit()
    after = db.begin()
    assert after.get("acct/1") == {"balance": 101}
    assert after.get("acct/2") == {"balance": 201}


def test_service_reports_a_conflicting_delete():
    db = ledger()
    service = KVService(db)
    closer = service.handle({"op": "begin"})["txn"]
    deposit = service.handle({"op": "begin"})["txn"]
    service.handle({"op": "delete", "txn": closer, "key": "acct/1"})
    service.handle({"op": "put", "txn": deposit, "key": "acct/1", "value": {"balance": 175}})
    assert service.handle({"op": "commit", "txn": deposit})["ok"] is True
    response = service.handle({"op": "commit", "txn": closer})
    assert response["ok"] is False
    assert response["error"] == "write_conflict"
    assert response["keys"] == ["acct/1"]
    assert service.handle({"op": "read", "key": "acct/1"})["value"] == {"balance": 175}
    assert service.open_handles() == []
