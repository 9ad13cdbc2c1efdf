"""More of docs/serializable.md (and of the SerializationError docstring) in serializable mode.

The interleaving checks run every schedule of a small scenario through the
store, compare each decision, each read of a committed transaction and the
final state with a model of the documented rules, and check that every
committed history is serializable.
"""

import itertools
import threading

import pytest

TOMB = object()
INDEX = ("by_g", "g", "r/")


def R(n, g="on"):
    return {"n": n, "g": g}


def _matches(key, value, term):
    _, field, prefix = INDEX
    if value is TOMB or value is None or not key.startswith(prefix) or not isinstance(value, dict):
        return False
    got = value.get(field)
    return isinstance(got, (str, int, float, bool)) and got == term and type(got) is type(term)


def _in_range(key, lo, hi):
    return (lo is None or key >= lo) and (hi is None or key < hi)


def _prefix_end(prefix):
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


def _bounds(lo, hi, prefix):
    """The range selected by scan(start=lo, end=hi, prefix=prefix)."""
    if prefix is None:
        return lo, hi
    starts = [s for s in (lo, prefix) if s is not None]
    ends = [e for e in (hi, _prefix_end(prefix)) if e is not None]
    return max(starts), min(ends)


def _weigh(result):
    if result is None or result is False:
        return 0
    if result is True:
        return 1
    if isinstance(result, int):
        return result
    if isinstance(result, dict):
        n = result.get("n", 0)
        return n if isinstance(n, int) else 0
    if isinstance(result, list):
        return sum(_weigh(row) for _, row in result) + 100 * len(result) + sum(len(k) for k, _ in result)
    return 0


def _value_for(name, index, results, extra):
    """Values written depend on everything the program read so far."""
    row = {"n": sum(_weigh(r) for r in results) + index, "by": name}
    row.update(extra)
    return row


def _steps(ops):
    return [step if isinstance(step, list) else [step] for step in ops]


def _flat(ops):
    return [op for step in _steps(ops) for op in step]


# -- the product side ---------------------------------------------------------------


def make_program(name, ops):
    def program(txn):
        results = []
        index = 0
        for step in _steps(ops):
            for op in step:
                results.append(_apply(txn, name, index, op, results))
                index += 1
            yield
        return results

    return program


def _apply(txn, name, index, op, results):
    kind = op[0]
    if kind == "get":
        return txn.get(op[1])
    if kind == "exists":
        return txn.exists(op[1])
    if kind == "put":
        txn.put(op[1], _value_for(name, index, results, op[2] if len(op) > 2 else {}))
        return None
    if kind == "del":
        txn.delete(op[1])
        return None
    if kind == "scan":
        _, lo, hi, prefix, limit, reverse = op
        return [list(row) for row in txn.scan(lo, hi, prefix=prefix, limit=limit, reverse=reverse)]
    if kind == "count":
        return txn.count(op[1], op[2])
    if kind == "lookup":
        return [list(row) for row in txn.lookup(INDEX[0], op[1])]
    if kind == "fail":
        raise RuntimeError("program gave up")
    raise AssertionError(op)


def _new_db(gc_every):
    from src.config import DatabaseOptions
    from src.engine import Database
    from src.indexes import IndexSpec

    return Database(options=DatabaseOptions(isolation="serializable", gc_every=gc_every), indexes=[IndexSpec(*INDEX)])


def run_product(initial, programs, schedule, read_only=(), gc_every=0, maintain=False):
    """Run one schedule; with ``maintain``, garbage collection and log compaction follow every turn."""
    from src.errors import SerializationError
    from src.maintenance import run_maintenance

    db = _new_db(gc_every)
    if initial:
        txn = db.begin()
        for key, value in sorted(initial.items()):
            txn.put(key, value)
        txn.commit()
    txns, gens, status, results = {}, {}, {}, {}
    typed = True
    for name in schedule:
        if name not in txns:
            txns[name] = db.snapshot() if name in read_only else db.begin()
            gens[name] = make_program(name, programs[name])(txns[name])
            status[name] = "unfinished"
        else:
            try:
                next(gens[name])
            except StopIteration as stop:
                try:
                    txns[name].commit()
                    status[name] = "committed"
                    results[name] = stop.value
                except SerializationError:
                    status[name] = "refused"
                except Exception as exc:  # any other refusal is wrong here
                    status[name] = "refused"
                    typed = False
            except RuntimeError:
                txns[name].abort()
                status[name] = "gave-up"
        if maintain:
            run_maintenance(db)
    for txn in txns.values():
        if txn.is_active:
            txn.abort()
    got = {name: (status.get(name, "unfinished"), _normalise(results.get(name))) for name in programs}
    tracked = db.stats()["tracked_transactions"]
    reader = db.snapshot()
    final = {key: value for key, value in reader.scan()}
    reader.abort()
    return got, final, tracked, typed


def _normalise(results):
    if results is None:
        return None
    return [[list(r) for r in x] if isinstance(x, list) else x for x in results]


# -- the reference model (docs/serializable.md) -------------------------------------


class _Txn:
    def __init__(self, name, ops, start):
        self.name = name
        self.steps = _steps(ops)
        self.ops = _flat(ops)
        self.start = start
        self.pos = 0
        self.step_no = 0
        self.results = []
        self.writes = {}
        self.keys = set()
        self.ranges = []  # (lo, hi, own)
        self.terms = []  # (term, own)
        self.status = "active"
        self.commit_ts = None


class Reference:
    def __init__(self, initial):
        self.versions = {}  # key -> [(ts, value, writer name)]
        self.clock = 0
        self.committed = []
        self.edges = {}
        if initial:
            self.clock = 1
            for key, value in initial.items():
                self.versions.setdefault(key, []).append((1, value, "<init>"))

    def visible(self, key, ts):
        seen = None
        for version in self.versions.get(key, []):
            if version[0] <= ts:
                seen = version
        return seen

    def read_value(self, txn, key):
        if key in txn.writes:
            value = txn.writes[key]
            return None if value is TOMB else value
        seen = self.visible(key, txn.start)
        return None if seen is None or seen[1] is TOMB else seen[1]

    def rows(self, txn, lo, hi):
        keys = {k for k in self.versions if _in_range(k, lo, hi)} | {k for k in txn.writes if _in_range(k, lo, hi)}
        out = []
        for key in sorted(keys):
            value = self.read_value(txn, key)
            if value is not None:
                out.append([key, value])
        return out

    def step(self, txn):
        index = txn.pos
        op = txn.ops[index]
        txn.pos += 1
        kind = op[0]
        if kind in ("get", "exists"):
            key = op[1]
            if key not in txn.writes:
                txn.keys.add(key)
            value = self.read_value(txn, key)
            result = value if kind == "get" else value is not None
        elif kind == "put":
            txn.writes[op[1]] = _value_for(txn.name, index, txn.results, op[2] if len(op) > 2 else {})
            result = None
        elif kind == "del":
            txn.writes[op[1]] = TOMB
            result = None
        elif kind in ("scan", "count"):
            if kind == "count":
                lo, hi, limit, reverse = op[1], op[2], None, False
            else:
                _, lo, hi, prefix, limit, reverse = op
                lo, hi = _bounds(lo, hi, prefix)
            rows = self.rows(txn, lo, hi)
            if reverse:
                rows.reverse()
            if limit is not None:
                rows = rows[:limit]
            elo, ehi = lo, hi
            examine = True
            if limit is not None and len(rows) >= limit:
                if limit == 0:
                    examine = False
                elif reverse:
                    elo = rows[-1][0]
                else:
                    ehi = rows[-1][0] + "\x00"
            if examine:
                txn.ranges.append((elo, ehi, frozenset(k for k in txn.writes if _in_range(k, elo, ehi))))
            result = len(rows) if kind == "count" else rows
        elif kind == "lookup":
            term = op[1]
            rows = []
            for key in sorted(set(self.versions) | set(txn.writes)):
                value = self.read_value(txn, key)
                if value is not None and _matches(key, value, term):
                    rows.append([key, value])
            txn.terms.append((term, frozenset(txn.writes)))
            result = rows
        elif kind == "fail":
            txn.status = "gave-up"
            return
        else:
            raise AssertionError(op)
        txn.results.append(result)

    def _depends(self, reader, key, values):
        if key in reader.keys:
            return True
        for lo, hi, own in reader.ranges:
            if _in_range(key, lo, hi) and key not in own:
                return True
        for term, own in reader.terms:
            if key not in own and any(_matches(key, v, term) for v in values):
                return True
        return False

    def _version_values(self, key, ts):
        chain = self.versions[key]
        for i, (vts, value, _) in enumerate(chain):
            if vts == ts:
                return (value, chain[i - 1][1] if i else TOMB)
        raise AssertionError

    def commit(self, txn):
        preds, succs = set(), set()
        for other in self.committed:
            if set(other.writes) & set(txn.writes):
                preds.add(other.name)
            for key, value in txn.writes.items():
                chain = self.versions.get(key, [])
                replaced = chain[-1][1] if chain else TOMB
                if self._depends(other, key, (value, replaced)):
                    preds.add(other.name)
        for key, chain in self.versions.items():
            seen = self.visible(key, txn.start)
            for vts, value, writer in chain:
                if writer == "<init>" or writer == txn.name:
                    continue
                if not self._depends(txn, key, self._version_values(key, vts)):
                    continue
                if vts > txn.start:
                    succs.add(writer)
                elif seen is not None and seen[0] == vts:
                    preds.add(writer)
        reach, stack = set(), list(succs)
        while stack:
            cur = stack.pop()
            if cur in reach:
                continue
            reach.add(cur)
            stack.extend(self.edges.get(cur, ()))
        if reach & preds:
            txn.status = "refused"
            return
        txn.status = "committed"
        self.edges[txn.name] = set(succs)
        for p in preds:
            self.edges.setdefault(p, set()).add(txn.name)
        if txn.writes:
            self.clock += 1
            txn.commit_ts = self.clock
            for key, value in sorted(txn.writes.items()):
                self.versions.setdefault(key, []).append((self.clock, value, txn.name))
        self.committed.append(txn)

    def run(self, programs, schedule):
        txns = {}
        for name in schedule:
            txn = txns.get(name)
            if txn is None:
                txns[name] = _Txn(name, programs[name], self.clock)
                continue
            if txn.step_no < len(txn.steps):
                for _ in txn.steps[txn.step_no]:
                    self.step(txn)
                    if txn.status == "gave-up":
                        break
                txn.step_no += 1
            else:
                self.commit(txn)
        result = {}
        for name in programs:
            txn = txns.get(name)
            if txn is None or txn.status == "active":
                result[name] = ("unfinished", None)
            else:
                result[name] = (txn.status, txn.results if txn.status == "committed" else None)
        final = {}
        for key in sorted(self.versions):
            value = self.versions[key][-1][1]
            if value is not TOMB:
                final[key] = value
        return result, final


def serial_replay(initial, programs, order):
    ref = Reference(initial)
    results = {}
    for name in order:
        txn = _Txn(name, programs[name], ref.clock)
        while txn.pos < len(txn.ops):
            ref.step(txn)
        if txn.writes:
            ref.clock += 1
            for key, value in sorted(txn.writes.items()):
                ref.versions.setdefault(key, []).append((ref.clock, value, name))
        results[name] = txn.results
    final = {k: c[-1][1] for k, c in ref.versions.items() if c[-1][1] is not TOMB}
    return results, final


_SERIAL_MEMO = {}


def is_serializable(initial, programs, outcome, final):
    memo = repr((sorted(initial.items()), sorted(programs.items()), sorted(outcome.items()), sorted(final.items())))
    if memo not in _SERIAL_MEMO:
        committed = [n for n, (status, _) in outcome.items() if status == "committed"]
        ok = False
        for order in itertools.permutations(committed):
            results, state = serial_replay(initial, {n: programs[n] for n in committed}, order)
            if state == final and all(results[n] == outcome[n][1] for n in committed):
                ok = True
                break
        _SERIAL_MEMO[memo] = ok
    return _SERIAL_MEMO[memo]


def all_schedules(programs):
    from src.interleave import schedules

    return list(
        schedules(
            {name: len(_steps(ops)) + (1 if _flat(ops)[-1][0] == "fail" else 2) for name, ops in programs.items()}
        )
    )


def check_all(initial, programs, *, read_only=(), gc_every=0, maintain=False, want_refusal=None):
    """Run every interleaving; compare with the model and check the guarantee. Returns the schedule count."""
    schedules = all_schedules(programs)
    saw_refusal = False
    for schedule in schedules:
        got, final, tracked, typed = run_product(initial, programs, schedule, read_only, gc_every, maintain)
        want, want_final = Reference(initial).run(programs, schedule)
        label = "".join(schedule)
        assert is_serializable(initial, programs, got, final), f"non-serializable history under {label}: {got}"
        assert {n: s for n, (s, _) in got.items()} == {n: s for n, (s, _) in want.items()}, (
            f"decisions under {label}: got {got}, expected {want}"
        )
        for name, (status, results) in want.items():
            if status == "committed":
                assert got[name][1] == _normalise(results), f"{name} read {got[name][1]} under {label}"
        assert final == want_final, f"final state under {label}"
        assert tracked == 0, f"tracked_transactions is {tracked} after {label}"
        assert typed, f"a refusal under {label} was not a SerializationError"
        saw_refusal |= any(s == "refused" for s, _ in want.values())
    if want_refusal is not None:
        assert saw_refusal == want_refusal
    return len(schedules)


def _db(**rows):
    db = _new_db(0)
    with db.begin() as txn:
        for key, value in rows.items():
            txn.put(key.replace("_", "/"), value)
    return db


# -- the tests ------------------------------------------------------------------------


def test_a_refusal_names_only_committed_transactions_on_the_cycle():
    """src/errors.py (SerializationError): "``keys`` is empty; ``transactions`` lists the ids of committed transactions on the cycle the commit would have closed, when known."
    docs/serializable.md: "A commit in serializable mode is refused with `SerializationError` (a kind of `WriteConflictError`) exactly when the dependency graph of the committed transactions, with the committing transaction added, would contain a cycle."

    The only cycle is T -> A (T read x, A overwrote it) -> B (B saw A's
    version of a) -> T (B read y, T overwrites it). C saw A's version of x
    too, but nothing leads from C back to T: C is not on the cycle.
    """
    from src.errors import SerializationError

    db = _db(x={"n": 1}, y={"n": 1}, a={"n": 1})
    t = db.begin()
    assert t.get("x") == {"n": 1}
    a = db.begin()
    a.put("x", {"n": 2})
    a.put("a", {"n": 2})
    a.commit()
    b = db.begin()
    assert b.get("a") == {"n": 2} and b.get("y") == {"n": 1}
    b.put("b", {"n": 3})
    b.commit()
    c = db.begin()
    assert c.get("x") == {"n": 2}
    c.put("c", {"n": 4})
    c.commit()
    t.put("y", {"n": 5})
    with pytest.raises(SerializationError) as raised:
        t.commit()
    assert raised.value.keys == ()
    assert set(raised.value.transactions) in ({a.id, b.id}, set())
    assert db.stats()["tracked_transactions"] == 0


def test_tracking_never_grows_beyond_what_the_open_transactions_can_reach():
    """docs/serializable.md: "The store keeps, for the committed transactions that may still matter, what they read and wrote."
    docs/serializable.md: "Whenever no transaction is open, it keeps none, so the tracking never grows beyond what the open transactions can still reach."
    docs/serializable.md: "If A read `k` and B wrote a version of `k` newer than the one A saw (B committed after A's snapshot was taken), there is an edge A → B."

    A transaction only gets an edge towards a committed one that wrote after
    its snapshot was taken; every other edge towards a committed transaction
    comes from one that committed before it. So writers that committed before
    the snapshot of every open transaction cannot be reached by them, exactly
    as when no transaction is open.
    """
    from src.errors import SerializationError

    db = _db(k0={"n": 0})
    report = db.snapshot()
    for i in range(1, 6):
        with db.begin() as txn:
            txn.put(f"k{i}", {"n": txn.get(f"k{i - 1}")["n"] + 1})
    later = db.snapshot()
    report.close()
    assert db.stats()["tracked_transactions"] == 0
    assert later.get("k5") == {"n": 5}
    assert later.commit() is None
    assert db.stats()["tracked_transactions"] == 0

    # A staggered stream: the next transaction always begins before the
    # previous one commits, so some transaction is open at every moment.
    # Each one reads the key written two commits earlier (which it sees) and
    # writes its own key.
    current = db.begin()
    names = []
    for i in range(60):
        following = db.begin()
        current.get(f"s{i - 2}")
        current.put(f"s{i}", {"n": i})
        current.commit()
        names.append(current.id)
        assert db.stats()["tracked_transactions"] <= 1, f"after {i + 1} commits"
        current = following
    # The last transaction still closes a cycle with the one before it: it
    # did not see s59 (written after its snapshot) and overwrites s57, which
    # that one read.
    assert current.get("s59") is None
    current.put("s57", {"n": -1})
    with pytest.raises(SerializationError):
        current.commit()
    assert db.stats()["tracked_transactions"] == 0

    # What the open transactions can still reach is kept, even a transaction
    # that committed before all of them began: L can reach P through W, which
    # committed after L's snapshot and read q before P overwrote it.
    w = db.begin()
    p = db.begin()
    assert p.get("r") is None
    p.put("q", {"n": 1})
    p.commit()
    late = db.begin()
    assert w.get("q") is None
    w.put("w", {"n": 1})
    w.commit()
    assert db.stats()["tracked_transactions"] <= 2
    assert late.get("w") is None
    late.put("r", {"n": 1})
    with pytest.raises(SerializationError):
        late.commit()
    assert db.stats()["tracked_transactions"] == 0


def test_collection_and_log_compaction_after_every_turn_never_change_a_read_only_decision():
    """docs/serializable.md: "Housekeeping (garbage collection, automatic or not, and log compaction) never changes a decision."
    docs/serializable.md: "It covers read-only transactions too, but only the ones that commit: a transaction that aborts, is refused, or is a snapshot closed without committing has no guarantee about what it read."
    docs/serializable.md: "Every committed history is serializable: there is an order of the committed transactions such that running them one after another in that order, each starting from the state the previous ones left, every read returns exactly what it returned in the real history, and the database ends in exactly the state the real history left."

    `src.maintenance.run_maintenance` (garbage collection, then log
    compaction) runs after every turn.
    """
    report = {
        "A": [[("get", "y"), ("put", "x")]],
        "B": [("put", "y")],
        "R": [[("get", "x"), ("get", "y")]],
    }
    assert check_all({"x": R(0), "y": R(0)}, report, read_only=("R",), maintain=True, want_refusal=True) == 1680


def test_collection_and_log_compaction_after_every_turn_keep_a_delete_as_a_dependency():
    """docs/serializable.md: "Housekeeping (garbage collection, automatic or not, and log compaction) never changes a decision."
    docs/serializable.md: "A delete writes a version too, so a read that found a key missing because A deleted it depends on A."
    docs/serializable.md: "Every committed history is serializable: there is an order of the committed transactions such that running them one after another in that order, each starting from the state the previous ones left, every read returns exactly what it returned in the real history, and the database ends in exactly the state the real history left."

    `src.maintenance.run_maintenance` (garbage collection, then log
    compaction) runs after every turn.
    """
    closed_account = {
        "Y": [[("get", "k"), ("put", "j")]],
        "W": [("del", "k")],
        "T": [[("get", "j"), ("get", "k")]],
    }
    assert check_all({"k": R(1), "j": R(2)}, closed_account, maintain=True, want_refusal=True) == 1680


def test_a_lookup_depends_on_the_version_that_moved_a_row_out_of_its_term():
    """docs/serializable.md: "So for rule 2 the version it saw counts only if it, or the version it replaced, was indexed under `term`; for rule 3 a newer version counts only if it, or the version it replaced, is indexed under `term`."
    docs/serializable.md: "If B read `k` and the version of `k` it saw was written by A, there is an edge A → B."
    docs/serializable.md: "Every committed history is serializable: there is an order of the committed transactions such that running them one after another in that order, each starting from the state the previous ones left, every read returns exactly what it returned in the real history, and the database ends in exactly the state the real history left."

    R's lookup does not find r/y because B moved it out of "on": the version
    R saw replaced a version indexed under "on", so R depends on B.
    """
    programs = {
        "A": [[("lookup", "on"), ("put", "x")]],
        "B": [("put", "r/y", {"g": "off"})],
        "R": [("get", "x"), ("lookup", "on")],
    }
    initial = {"x": {"n": 0}, "r/y": R(0, "on")}
    assert check_all(initial, programs, read_only=("R",), want_refusal=True) == 4200


def test_a_scan_made_before_writing_a_key_still_read_that_key():
    """docs/serializable.md: "A read of a key that the transaction had already written itself (put or delete, before that read) reads its own write and not the database: it adds no edge."
    docs/serializable.md: "`scan` reads every key of the part of its range that it examined, whether or not a row exists there."
    docs/serializable.md: "If A and B both wrote key `k` and A committed first, there is an edge A → B."

    A scans before it writes r/b, so that scan read r/b from the database.
    """
    programs = {
        "A": [("scan", "r/", "r0", None, None, False), ("put", "r/b")],
        "B": [("put", "r/b", {"g": "off"})],
    }
    assert check_all({"r/a": R(1)}, programs, want_refusal=True) == 35


def test_a_limited_scan_that_returned_its_own_insert_examined_only_up_to_it():
    """docs/serializable.md: "When it returned `limit` rows, it examined the range from its start up to and including the last key it returned (for `reverse`, from the last key it returned up to the end of the range)."
    docs/serializable.md: "A read of a key that the transaction had already written itself (put or delete, before that read) reads its own write and not the database: it adds no edge. This holds for each key of a scan or lookup as well."
    docs/serializable.md: "Otherwise it succeeds."

    The worker's scans return the row it inserted itself, so they examined
    nothing the producer writes.
    """
    forward = {
        "A": [("put", "r/a"), ("scan", "r/", "r0", None, 1, False), ("put", "w")],
        "B": [("put", "w"), ("put", "r/b")],
    }
    backward = {
        "A": [("put", "r/z"), ("scan", "r/", "r0", None, 1, True), ("put", "w")],
        "B": [("put", "w"), ("put", "r/x")],
    }
    initial = {"r/c": R(1), "r/w": R(2)}
    assert check_all(initial, forward, want_refusal=False) == 126
    assert check_all(initial, backward, want_refusal=False) == 126


def test_a_limited_scan_past_its_own_delete_examined_up_to_the_row_it_returned():
    """docs/serializable.md: "When it returned `limit` rows, it examined the range from its start up to and including the last key it returned (for `reverse`, from the last key it returned up to the end of the range)."
    docs/serializable.md: "`scan` reads every key of the part of its range that it examined, whether or not a row exists there."
    docs/serializable.md: "Every committed history is serializable: there is an order of the committed transactions such that running them one after another in that order, each starting from the state the previous ones left, every read returns exactly what it returned in the real history, and the database ends in exactly the state the real history left."

    The worker deleted r/b itself, so its scan with limit=1 returned r/d and
    examined everything up to r/d, r/c included.
    """
    forward = {
        "A": [("del", "r/b"), ("scan", "r/", "r0", None, 1, False), ("put", "w")],
        "B": [("put", "w"), ("put", "r/c")],
    }
    backward = {
        "A": [("del", "r/d"), ("scan", "r/", "r0", None, 1, True), ("put", "w")],
        "B": [("put", "w"), ("put", "r/c")],
    }
    initial = {"r/b": R(1), "r/d": R(2)}
    assert check_all(initial, forward, want_refusal=True) == 126
    assert check_all(initial, backward, want_refusal=True) == 126


def test_limited_scans_examine_from_the_start_and_to_the_end_of_their_own_range():
    """docs/serializable.md: "When it returned `limit` rows, it examined the range from its start up to and including the last key it returned (for `reverse`, from the last key it returned up to the end of the range)."
    docs/serializable.md: "`scan` reads every key of the part of its range that it examined, whether or not a row exists there."
    docs/serializable.md: "Otherwise it succeeds."

    The scans take their range from `start` or `end` together with `prefix`.
    """
    initial = {"r/b": R(1), "r/d": R(2), "r/f": R(3)}

    def scenario(scan, inserted):
        return {"A": [scan, ("put", "w")], "B": [("put", "w"), ("put", inserted)]}

    forward = ("scan", "r/c", None, "r/", 1, False)  # returns r/d, examined [r/c, r/d]
    backward = ("scan", None, "r/e", "r/", 1, True)  # returns r/d, examined [r/d, r/e)
    assert check_all(initial, scenario(forward, "r/a"), want_refusal=False) == 70
    assert check_all(initial, scenario(forward, "r/c5"), want_refusal=True) == 70
    assert check_all(initial, scenario(backward, "r/e5"), want_refusal=False) == 70
    assert check_all(initial, scenario(backward, "r/d5"), want_refusal=True) == 70


def test_only_the_final_write_to_a_key_counts_for_a_lookup():
    """docs/serializable.md: ""Wrote `k`" means a `put` or a `delete` that is part of the transaction's commit (only its final write to a key counts)."
    docs/serializable.md: "for rule 3 a newer version counts only if it, or the version it replaced, is indexed under `term`."
    docs/serializable.md: "Otherwise it succeeds."
    """
    moved_away = {
        "A": [("lookup", "on"), ("put", "w")],
        "B": [("put", "w"), [("put", "r/k", {"g": "on"}), ("put", "r/k", {"g": "off"})]],
    }
    moved_in = {
        "A": [("lookup", "on"), ("put", "w")],
        "B": [("put", "w"), [("put", "r/k", {"g": "off"}), ("put", "r/k", {"g": "on"})]],
    }
    initial = {"r/a": R(1, "on"), "r/k": R(2, "off")}
    assert check_all(initial, moved_away, want_refusal=False) == 70
    assert check_all(initial, moved_in, want_refusal=True) == 70


def test_deleting_a_key_that_does_not_exist_is_a_write():
    """src/transaction.py (Transaction.delete): "Buffer a delete of ``key`` (deleting a missing key is allowed)."
    docs/serializable.md: ""Wrote `k`" means a `put` or a `delete` that is part of the transaction's commit (only its final write to a key counts)."
    docs/serializable.md: "If A and B both wrote key `k` and A committed first, there is an edge A → B."
    docs/serializable.md: "Housekeeping (garbage collection, automatic or not, and log compaction) never changes a decision."

    k does not exist; A deletes it anyway, B creates it.
    """
    programs = {
        "A": [("get", "x"), ("del", "k")],
        "B": [("put", "k"), ("put", "x")],
    }
    for gc_every in (0, 1):
        assert check_all({"x": R(1)}, programs, gc_every=gc_every, want_refusal=True) == 70


def test_a_transaction_begun_with_begin_that_writes_nothing_is_checked_like_a_snapshot():
    """docs/serializable.md: "The graph has a node for every committed transaction, read-only ones included, and these edges between two different transactions (the committing transaction counts as committed after every committed one):"
    docs/serializable.md: "It covers read-only transactions too, but only the ones that commit: a transaction that aborts, is refused, or is a snapshot closed without committing has no guarantee about what it read."
    docs/serializable.md: "* `get(k)` and `exists(k)` read `k`."
    docs/serializable.md: "`count` reads like a scan without `limit`."

    The report here is an ordinary transaction (``db.begin()``) that commits
    without writing; it reads with `exists` and `count`.
    """
    programs = {
        "A": [[("count", "r/", "r0"), ("put", "x")]],
        "B": [("put", "r/b", {"g": "off"})],
        "R": [("exists", "x"), ("count", "r/", "r0")],
    }
    assert check_all({"r/a": R(1)}, programs, want_refusal=True) == 4200


def test_a_blind_writer_in_another_thread_commits_while_the_first_is_still_open():
    """issue: "Commits must not be serialized behind a global lock held across a transaction's lifetime; readers must keep reading from their snapshots."
    issue: "The rate loader writes the day's rates without reading them; when two loaders overlap, one of them is always refused, although nothing was read."
    docs/serializable.md: "There is no other reason to refuse a commit in this mode: in particular, the first-committer-wins rule does not apply, so two concurrent transactions may both write a key as long as no cycle forms."
    docs/serializable.md: "A read of a key that the transaction had already written itself (put or delete, before that read) reads its own write and not the database: it adds no edge."
    """
    db = _db(rate_eur={"rate": 1})
    first = db.begin()
    first.put("rate/eur", {"rate": 2})
    report = db.snapshot()
    assert report.get("rate/eur") == {"rate": 1}
    done = []

    def second_loader():
        txn = db.begin()
        txn.put("rate/eur", {"rate": 3})
        done.append(txn.commit())

    worker = threading.Thread(target=second_loader, daemon=True)
    worker.start()
    worker.join(timeout=1.5)
    assert done and done[0] is not None, "a commit waited for a transaction that was still open"
    assert report.get("rate/eur") == {"rate": 1}
    assert first.get("rate/eur") == {"rate": 2}
    second_ts = done[0]
    assert first.commit() > second_ts
    assert report.commit() is None
    with db.snapshot() as view:
        assert view.get("rate/eur") == {"rate": 2}
    assert db.stats()["tracked_transactions"] == 0
