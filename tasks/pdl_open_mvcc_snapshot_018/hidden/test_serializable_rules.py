"""Named schedules in serializable mode (docs/serializable.md)."""

import pytest


def serializable_db(gc_every=0, **rows):
    from src.config import DatabaseOptions
    from src.engine import Database
    from src.indexes import IndexSpec

    db = Database(
        options=DatabaseOptions(isolation="serializable", gc_every=gc_every),
        indexes=[IndexSpec("by_g", "g", "r/")],
    )
    with db.begin() as txn:
        for key, value in rows.items():
            txn.put(key.replace("_", "/"), value)
    return db


def current(db, key):
    with db.snapshot() as view:
        return view.get(key)


def test_two_blind_writers_of_one_key_both_commit():
    """Docs: "There is no other reason to refuse a commit in this mode: in particular, the first-committer-wins rule does not apply, so two concurrent transactions may both write a key as long as no cycle forms."
    Docs: "If A and B both wrote key `k` and A committed first, there is an edge A → B."
    Docs: "Whenever no transaction is open, it keeps none, so the tracking never grows beyond what the open transactions can still reach."
    """
    db = serializable_db(acct_1={"balance": 10})
    a = db.begin()
    b = db.begin()
    a.put("acct/1", {"balance": 20})
    b.put("acct/1", {"balance": 30})
    ts_a = a.commit()
    ts_b = b.commit()
    assert ts_b > ts_a
    assert current(db, "acct/1") == {"balance": 30}
    assert db.stats()["tracked_transactions"] == 0


def test_reading_back_your_own_write_does_not_lose_to_a_concurrent_writer():
    """Docs: "A read of a key that the transaction had already written itself (put or delete, before that read) reads its own write and not the database: it adds no edge."
    """
    db = serializable_db(acct_1={"balance": 10})
    t = db.begin()
    u = db.begin()
    t.put("acct/1", {"balance": 1})
    assert t.get("acct/1") == {"balance": 1}
    u.put("acct/1", {"balance": 2})
    u.commit()
    assert t.commit() is not None
    assert current(db, "acct/1") == {"balance": 1}


def _fekete(db):
    """A withdraws with a penalty if it saw x + y < 10; B deposits 20 into y; R reports."""
    a = db.begin()
    x, y = a.get("x")["n"], a.get("y")["n"]
    b = db.begin()
    b.put("y", {"n": b.get("y")["n"] + 20})
    b.commit()
    r = db.snapshot()
    seen = (r.get("x")["n"], r.get("y")["n"])
    a.put("x", {"n": x - 10 - (1 if x + y < 10 else 0)})
    return a, r, seen


def test_the_report_commits_first_and_the_withdrawal_is_refused():
    """Docs: "The graph has a node for every committed transaction, read-only ones included, and these edges between two different transactions (the committing transaction counts as committed after every committed one):"
    Docs: "A refused transaction is aborted and leaves nothing behind, neither its writes nor its reads."
    Docs: "Whenever no transaction is open, it keeps none, so the tracking never grows beyond what the open transactions can still reach."
    """
    from src.errors import SerializationError, WriteConflictError
    from src.transaction import TxnState

    db = serializable_db(x={"n": 0}, y={"n": 0})
    a, r, seen = _fekete(db)
    assert seen == (0, 20)
    assert r.commit() is None
    with pytest.raises(SerializationError) as raised:
        a.commit()
    assert isinstance(raised.value, WriteConflictError)
    assert a.state is TxnState.ABORTED
    assert current(db, "x") == {"n": 0}
    retry = db.begin()
    retry.put("x", {"n": retry.get("x")["n"] - 10})
    assert retry.commit() is not None
    assert db.stats()["tracked_transactions"] == 0


def test_the_withdrawal_commits_first_and_the_report_is_refused():
    """Docs: "It covers read-only transactions too, but only the ones that commit: a transaction that aborts, is refused, or is a snapshot closed without committing has no guarantee about what it read."
    Docs: "A commit in serializable mode is refused with `SerializationError` (a kind of `WriteConflictError`) exactly when the dependency graph of the committed transactions, with the committing transaction added, would contain a cycle."
    """
    from src.errors import SerializationError

    db = serializable_db(x={"n": 0}, y={"n": 0})
    a, r, seen = _fekete(db)
    a.commit()
    with pytest.raises(SerializationError):
        r.commit()
    assert current(db, "x") == {"n": -11}


def test_two_doctors_going_on_call_cannot_both_see_one_on_call():
    """Docs: "`scan` reads every key of the part of its range that it examined, whether or not a row exists there."
    Docs: "`count` reads like a scan without `limit`."
    """
    from src.errors import SerializationError

    db = serializable_db(oncall_ann={"on": True})
    a = db.begin()
    b = db.begin()
    assert a.count(prefix="oncall/") == 1 and b.count(prefix="oncall/") == 1
    a.put("oncall/bob", {"on": True})
    b.put("oncall/cid", {"on": True})
    a.commit()
    with pytest.raises(SerializationError):
        b.commit()
    with db.snapshot() as view:
        assert view.count(prefix="oncall/") == 2


def test_a_worker_taking_the_first_queue_item():
    """Docs: "When it returned `limit` rows, it examined the range from its start up to and including the last key it returned (for `reverse`, from the last key it returned up to the end of the range)."
    """
    from src.errors import SerializationError

    for inserted, refused in (("q/a", True), ("q/c", False)):
        db = serializable_db(q_b={"job": 1}, q_d={"job": 2})
        worker = db.begin()
        producer = db.begin()
        assert worker.scan(prefix="q/", limit=1) == [("q/b", {"job": 1})]
        assert producer.get("done/b") is None
        producer.put(inserted, {"job": 3})
        worker.put("done/b", {"by": "worker"})
        worker.commit()
        if refused:
            with pytest.raises(SerializationError):
                producer.commit()
        else:
            assert producer.commit() is not None


def test_a_row_moving_into_a_looked_up_term():
    """Docs: "`lookup(index, term)` reads every key under the index's prefix, but it only depends on a version of such a key that is indexed under `term` or that replaced a version indexed under `term`."
    """
    from src.errors import SerializationError

    db = serializable_db(r_a={"g": "on"}, r_b={"g": "off"})
    a = db.begin()
    b = db.begin()
    assert [k for k, _ in a.lookup("by_g", "on")] == ["r/a"]
    assert [k for k, _ in b.lookup("by_g", "off")] == ["r/b"]
    a.put("r/c", {"g": "off"})
    b.put("r/b", {"g": "on"})
    a.commit()
    with pytest.raises(SerializationError):
        b.commit()


def test_a_delete_collected_before_the_read_still_orders_the_reader():
    """Docs: "A delete writes a version too, so a read that found a key missing because A deleted it depends on A."
    Docs: "Housekeeping (garbage collection, automatic or not, and log compaction) never changes a decision."
    Docs: "Whenever no transaction is open, it keeps none, so the tracking never grows beyond what the open transactions can still reach."
    """
    from src.errors import SerializationError

    db = serializable_db(gc_every=1, k={"n": 1}, j={"n": 2})
    y = db.begin()
    assert y.get("k") == {"n": 1}
    y.put("j", {"n": 3})
    w = db.begin()
    w.delete("k")
    w.commit()
    t = db.snapshot()
    assert t.get("j") == {"n": 2}
    y.commit()
    assert t.get("k") is None
    with pytest.raises(SerializationError):
        t.commit()
    assert db.stats()["tracked_transactions"] == 0
