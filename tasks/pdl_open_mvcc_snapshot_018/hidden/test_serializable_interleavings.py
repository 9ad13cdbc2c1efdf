"""Every interleaving of small scenarios in serializable mode (docs/serializable.md).

Each schedule is run through src.interleave and compared with a model of the
documented rules; the committed history is also checked to be serializable.
"""

import itertools

TOMB = object()
INDEX = ("by_g", "g", "r/")


def _matches(key, value, term):
    name, field, prefix = INDEX
    if value is TOMB or value is None or not key.startswith(prefix) or not isinstance(value, dict):
        return False
    got = value.get(field)
    return isinstance(got, (str, int, float, bool)) and got == term and type(got) is type(term)


def _in_range(key, lo, hi):
    return (lo is None or key >= lo) and (hi is None or key < hi)


def _value_for(name, index, results, extra):
    """Values written depend on everything the program read so far."""
    total = 0
    for result in results:
        total += _weigh(result)
    row = {"n": total + index, "by": name}
    row.update(extra)
    return row


def _weigh(result):
    if result is None or result is False:
        return 0
    if result is True:
        return 1
    if isinstance(result, int):
        return result
    if isinstance(result, dict):
        return result.get("n", 0) if isinstance(result.get("n", 0), int) else 0
    if isinstance(result, list):
        return sum(_weigh(row) for _, row in result) + 100 * len(result) + sum(len(k) for k, _ in result)
    return 0


# -- the product side ---------------------------------------------------------------


def _steps(ops):
    return [step if isinstance(step, list) else [step] for step in ops]


def _flat(ops):
    return [op for step in _steps(ops) for op in step]


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
        _, lo, hi, limit, reverse = op
        return [list(row) for row in txn.scan(lo, hi, limit=limit, reverse=reverse)]
    if kind == "count":
        return txn.count(op[1], op[2])
    if kind == "lookup":
        return [list(row) for row in txn.lookup(INDEX[0], op[1])]
    if kind == "fail":
        raise RuntimeError("program gave up")
    raise AssertionError(op)


def run_product(initial, programs, schedule, read_only=(), gc_every=0):
    from src.config import DatabaseOptions
    from src.engine import Database
    from src.indexes import IndexSpec
    from src.interleave import Interleaving

    db = Database(options=DatabaseOptions(isolation="serializable", gc_every=gc_every),
                  indexes=[IndexSpec(*INDEX)])
    if initial:
        txn = db.begin()
        for key, value in sorted(initial.items()):
            txn.put(key, value)
        txn.commit()
    outcomes = Interleaving(db).run(
        {name: make_program(name, ops) for name, ops in programs.items()}, schedule, read_only=read_only
    )
    result = {}
    for name, outcome in outcomes.items():
        if outcome.committed:
            status = "committed"
        elif outcome.error is not None and isinstance(outcome.error, RuntimeError):
            status = "gave-up"
        else:
            status = "refused" if outcome.refused else "unfinished"
        result[name] = (status, _normalise(outcome.result))
    tracked = db.stats().get("tracked_transactions")
    reader = db.snapshot()
    final = {key: value for key, value in reader.scan()}
    reader.abort()
    refused_type_ok = all(
        isinstance(o.error, __import__("src.errors", fromlist=["SerializationError"]).SerializationError)
        for o in outcomes.values() if o.refused
    )
    return result, final, tracked, refused_type_ok


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
        self.replaced = {}


class Reference:
    def __init__(self, initial):
        self.versions = {}  # key -> [(ts, value, writer name)]
        self.clock = 0
        self.committed = []  # _Txn in commit order
        self.edges = {}  # name -> set of names
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
                _, lo, hi, limit, reverse = op
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
            keys = set(self.versions) | set(txn.writes)
            rows = []
            for key in sorted(keys):
                value = self.read_value(txn, key)
                if value is not None and _matches(key, value, term):
                    rows.append([key, value])
            txn.terms.append((term, frozenset(txn.writes)))
            result = rows
        elif kind == "fail":
            txn.status = "gave-up"
            txn.results = None
            return
        else:
            raise AssertionError(op)
        txn.results.append(result)

    # which versions matter to a transaction's reads
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
                values = self._version_values(key, vts)
                if not self._depends(txn, key, values):
                    continue
                if vts > txn.start:
                    succs.add(writer)
                elif seen is not None and seen[0] == vts:
                    preds.add(writer)
        # cycle?
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
            if txn.status == "gave-up":
                raise AssertionError("turn after giving up")
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
            if txn is None:
                result[name] = ("unfinished", None)
            elif txn.status == "gave-up":
                result[name] = ("gave-up", None)
            elif txn.status == "active":
                result[name] = ("unfinished", None)
            else:
                result[name] = (txn.status, txn.results if txn.status == "committed" or True else None)
        final = {}
        for key in sorted(self.versions):
            value = self.versions[key][-1][1]
            if value is not TOMB:
                final[key] = value
        return result, final


def serial_replay(initial, programs, order):
    """Run the programs one after another on a plain dict; their results and the final state."""
    ref = Reference(initial)
    results = {}
    for name in order:
        txn = _Txn(name, programs[name], ref.clock)
        while txn.pos < len(txn.ops):
            ref.step(txn)
        txn.status = "committed"
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
        _SERIAL_MEMO[memo] = _is_serializable(initial, programs, outcome, final)
    return _SERIAL_MEMO[memo]


def _is_serializable(initial, programs, outcome, final):
    committed = [n for n, (status, _) in outcome.items() if status == "committed"]
    for order in itertools.permutations(committed):
        results, state = serial_replay(initial, {n: programs[n] for n in committed}, order)
        if state == final and all(results[n] == outcome[n][1] for n in committed):
            return True
    return False


def all_schedules(programs, read_only=()):
    from src.interleave import schedules

    return list(schedules({name: len(_steps(ops)) + (1 if _flat(ops)[-1][0] == "fail" else 2)
                           for name, ops in programs.items()}))


def check_all(initial, programs, *, read_only=(), gc_every=0, want_refusal=None, want_commit=None):
    """Run every interleaving; compare with the reference and check the guarantee.

    Returns the number of schedules checked.
    """
    schedules = all_schedules(programs)
    saw_refusal = saw_all_commit = False
    for schedule in schedules:
        got, final, tracked, typed = run_product(initial, programs, schedule, read_only, gc_every)
        want, want_final = Reference(initial).run(programs, schedule)
        label = "".join(schedule)
        assert is_serializable(initial, programs, got, final), f"non-serializable history under {label}: {got}"
        assert {n: s for n, (s, _) in got.items()} == {n: s for n, (s, _) in want.items()}, (
            f"decisions under {label}: got {got}, expected {want}"
        )
        for name, (status, results) in want.items():
            if status == "committed":
                assert got[name][1] == results, f"{name} read {got[name][1]} under {label}, expected {results}"
        assert final == want_final, f"final state under {label}"
        assert tracked == 0, f"tracked_transactions is {tracked} after {label}"
        assert typed, f"a refusal under {label} was not a SerializationError"
        statuses = [s for s, _ in want.values()]
        saw_refusal |= "refused" in statuses
        saw_all_commit |= all(s == "committed" for s in statuses)
    if want_refusal is not None:
        assert saw_refusal == want_refusal
    if want_commit is not None:
        assert saw_all_commit == want_commit
    return len(schedules)


R = lambda n, g="on": {"n": n, "g": g}


def test_reading_your_own_write_is_not_a_dependency_in_any_interleaving():
    """Docs: "A read of a key that the transaction had already written itself (put or delete, before that read) reads its own write and not the database: it adds no edge."
    Docs: "There is no other reason to refuse a commit in this mode: in particular, the first-committer-wins rule does not apply, so two concurrent transactions may both write a key as long as no cycle forms."
    Docs: "Every committed history is serializable: there is an order of the committed transactions such that running them one after another in that order, each starting from the state the previous ones left, every read returns exactly what it returned in the real history, and the database ends in exactly the state the real history left."
    Docs: "A commit in serializable mode is refused with `SerializationError` (a kind of `WriteConflictError`) exactly when the dependency graph of the committed transactions, with the committing transaction added, would contain a cycle."
    Docs: "Whenever no transaction is open, it keeps none, so the tracking never grows beyond what the open transactions can still reach."
    """
    programs = {"A": [("put", "x"), ("get", "x")], "B": [("get", "x"), ("put", "x")]}
    assert check_all({"x": R(1)}, programs, want_refusal=True) == 70


def test_blind_writers_both_commit_in_every_interleaving():
    """Docs: "There is no other reason to refuse a commit in this mode: in particular, the first-committer-wins rule does not apply, so two concurrent transactions may both write a key as long as no cycle forms."
    Docs: "If A and B both wrote key `k` and A committed first, there is an edge A → B."
    Docs: "Every committed history is serializable: there is an order of the committed transactions such that running them one after another in that order, each starting from the state the previous ones left, every read returns exactly what it returned in the real history, and the database ends in exactly the state the real history left."
    Docs: "A commit in serializable mode is refused with `SerializationError` (a kind of `WriteConflictError`) exactly when the dependency graph of the committed transactions, with the committing transaction added, would contain a cycle."
    Docs: "Whenever no transaction is open, it keeps none, so the tracking never grows beyond what the open transactions can still reach."
    """
    programs = {"A": [("put", "x"), ("put", "y")], "B": [("put", "y"), ("del", "x")]}
    assert check_all({"x": R(1)}, programs, want_refusal=False) == 70


def test_write_write_and_read_write_edges_together():
    """Docs: "If A and B both wrote key `k` and A committed first, there is an edge A → B."
    Docs: "If A read `k` and B wrote a version of `k` newer than the one A saw (B committed after A's snapshot was taken), there is an edge A → B."
    Docs: "Every committed history is serializable: there is an order of the committed transactions such that running them one after another in that order, each starting from the state the previous ones left, every read returns exactly what it returned in the real history, and the database ends in exactly the state the real history left."
    Docs: "A commit in serializable mode is refused with `SerializationError` (a kind of `WriteConflictError`) exactly when the dependency graph of the committed transactions, with the committing transaction added, would contain a cycle."
    Docs: "Whenever no transaction is open, it keeps none, so the tracking never grows beyond what the open transactions can still reach."
    """
    programs = {"A": [("get", "y"), ("put", "x")], "B": [("put", "x"), ("put", "y")]}
    assert check_all({"x": R(1), "y": R(2)}, programs, want_refusal=True, want_commit=True) == 70


def test_read_only_anomaly_in_every_interleaving():
    """Docs: "It covers read-only transactions too, but only the ones that commit: a transaction that aborts, is refused, or is a snapshot closed without committing has no guarantee about what it read."
    Docs: "The graph has a node for every committed transaction, read-only ones included, and these edges between two different transactions (the committing transaction counts as committed after every committed one):"
    Docs: "Every committed history is serializable: there is an order of the committed transactions such that running them one after another in that order, each starting from the state the previous ones left, every read returns exactly what it returned in the real history, and the database ends in exactly the state the real history left."
    Docs: "A commit in serializable mode is refused with `SerializationError` (a kind of `WriteConflictError`) exactly when the dependency graph of the committed transactions, with the committing transaction added, would contain a cycle."
    Docs: "Whenever no transaction is open, it keeps none, so the tracking never grows beyond what the open transactions can still reach."
    """
    programs = {
        "A": [[("get", "y"), ("put", "x")]],
        "B": [("put", "y")],
        "R": [("get", "x"), ("get", "y")],
    }
    assert check_all({"x": R(0), "y": R(0)}, programs, read_only=("R",), want_refusal=True) == 4200


def test_read_only_anomaly_with_garbage_collection_after_every_commit():
    """Docs: "Housekeeping (garbage collection, automatic or not, and log compaction) never changes a decision."
    Docs: "It covers read-only transactions too, but only the ones that commit: a transaction that aborts, is refused, or is a snapshot closed without committing has no guarantee about what it read."
    Docs: "Every committed history is serializable: there is an order of the committed transactions such that running them one after another in that order, each starting from the state the previous ones left, every read returns exactly what it returned in the real history, and the database ends in exactly the state the real history left."
    Docs: "A commit in serializable mode is refused with `SerializationError` (a kind of `WriteConflictError`) exactly when the dependency graph of the committed transactions, with the committing transaction added, would contain a cycle."
    Docs: "Whenever no transaction is open, it keeps none, so the tracking never grows beyond what the open transactions can still reach."
    """
    programs = {
        "A": [[("get", "y"), ("put", "x")]],
        "B": [("put", "y")],
        "R": [("get", "x"), ("get", "y")],
    }
    assert check_all({"x": R(0), "y": R(0)}, programs, read_only=("R",), gc_every=1, want_refusal=True) == 4200


def test_a_key_found_missing_depends_on_its_delete():
    """Docs: "A delete writes a version too, so a read that found a key missing because A deleted it depends on A."
    Docs: "If B read `k` and the version of `k` it saw was written by A, there is an edge A → B."
    Docs: "Every committed history is serializable: there is an order of the committed transactions such that running them one after another in that order, each starting from the state the previous ones left, every read returns exactly what it returned in the real history, and the database ends in exactly the state the real history left."
    Docs: "A commit in serializable mode is refused with `SerializationError` (a kind of `WriteConflictError`) exactly when the dependency graph of the committed transactions, with the committing transaction added, would contain a cycle."
    Docs: "Whenever no transaction is open, it keeps none, so the tracking never grows beyond what the open transactions can still reach."
    """
    programs = {
        "Y": [[("get", "k"), ("put", "j")]],
        "W": [("del", "k")],
        "T": [("get", "j"), ("get", "k")],
    }
    assert check_all({"k": R(1), "j": R(2)}, programs, want_refusal=True) == 4200


def test_a_delete_collected_by_garbage_collection_still_counts():
    """Docs: "A delete writes a version too, so a read that found a key missing because A deleted it depends on A."
    Docs: "Housekeeping (garbage collection, automatic or not, and log compaction) never changes a decision."
    Docs: "Every committed history is serializable: there is an order of the committed transactions such that running them one after another in that order, each starting from the state the previous ones left, every read returns exactly what it returned in the real history, and the database ends in exactly the state the real history left."
    Docs: "A commit in serializable mode is refused with `SerializationError` (a kind of `WriteConflictError`) exactly when the dependency graph of the committed transactions, with the committing transaction added, would contain a cycle."
    Docs: "Whenever no transaction is open, it keeps none, so the tracking never grows beyond what the open transactions can still reach."
    """
    programs = {
        "Y": [[("get", "k"), ("put", "j")]],
        "W": [("del", "k")],
        "T": [("get", "j"), ("get", "k")],
    }
    assert check_all({"k": R(1), "j": R(2)}, programs, gc_every=1, want_refusal=True) == 4200


def test_cycles_through_transactions_that_finished_earlier():
    """Docs: "Whenever no transaction is open, it keeps none, so the tracking never grows beyond what the open transactions can still reach."
    Docs: "Every committed history is serializable: there is an order of the committed transactions such that running them one after another in that order, each starting from the state the previous ones left, every read returns exactly what it returned in the real history, and the database ends in exactly the state the real history left."
    Docs: "A commit in serializable mode is refused with `SerializationError` (a kind of `WriteConflictError`) exactly when the dependency graph of the committed transactions, with the committing transaction added, would contain a cycle."
    """
    programs = {
        "X": [[("get", "k2"), ("put", "k")]],
        "T": [("put", "k2")],
        "U": [("get", "k2"), ("get", "k")],
    }
    assert check_all({"k": R(1), "k2": R(2)}, programs, want_refusal=True) == 4200


def test_phantoms_through_count():
    """Docs: "`scan` reads every key of the part of its range that it examined, whether or not a row exists there."
    Docs: "`count` reads like a scan without `limit`."
    Docs: "Every committed history is serializable: there is an order of the committed transactions such that running them one after another in that order, each starting from the state the previous ones left, every read returns exactly what it returned in the real history, and the database ends in exactly the state the real history left."
    Docs: "A commit in serializable mode is refused with `SerializationError` (a kind of `WriteConflictError`) exactly when the dependency graph of the committed transactions, with the committing transaction added, would contain a cycle."
    Docs: "Whenever no transaction is open, it keeps none, so the tracking never grows beyond what the open transactions can still reach."
    """
    programs = {
        "A": [("count", "r/", "r0"), ("put", "r/b")],
        "B": [("count", "r/", "r0"), ("put", "r/c")],
    }
    assert check_all({"r/a": R(1)}, programs, want_refusal=True) == 70


def test_a_limited_scan_depends_on_inserts_inside_what_it_examined():
    """Docs: "When it returned `limit` rows, it examined the range from its start up to and including the last key it returned (for `reverse`, from the last key it returned up to the end of the range)."
    Docs: "Every committed history is serializable: there is an order of the committed transactions such that running them one after another in that order, each starting from the state the previous ones left, every read returns exactly what it returned in the real history, and the database ends in exactly the state the real history left."
    Docs: "A commit in serializable mode is refused with `SerializationError` (a kind of `WriteConflictError`) exactly when the dependency graph of the committed transactions, with the committing transaction added, would contain a cycle."
    Docs: "Whenever no transaction is open, it keeps none, so the tracking never grows beyond what the open transactions can still reach."
    """
    programs = {
        "A": [("scan", "r/", "r0", 1, False), ("put", "w")],
        "B": [("put", "w"), ("put", "r/a")],
    }
    assert check_all({"r/b": R(1), "r/d": R(2)}, programs, want_refusal=True) == 70


def test_a_limited_scan_ignores_inserts_after_what_it_examined():
    """Docs: "When it returned `limit` rows, it examined the range from its start up to and including the last key it returned (for `reverse`, from the last key it returned up to the end of the range)."
    Docs: "Otherwise it succeeds."
    Docs: "Every committed history is serializable: there is an order of the committed transactions such that running them one after another in that order, each starting from the state the previous ones left, every read returns exactly what it returned in the real history, and the database ends in exactly the state the real history left."
    Docs: "A commit in serializable mode is refused with `SerializationError` (a kind of `WriteConflictError`) exactly when the dependency graph of the committed transactions, with the committing transaction added, would contain a cycle."
    Docs: "Whenever no transaction is open, it keeps none, so the tracking never grows beyond what the open transactions can still reach."
    """
    programs = {
        "A": [("scan", "r/", "r0", 1, False), ("put", "w")],
        "B": [("put", "w"), ("put", "r/c")],
    }
    assert check_all({"r/b": R(1), "r/d": R(2)}, programs, want_refusal=False) == 70


def test_a_limited_reverse_scan_examines_from_its_last_key_to_the_end():
    """Docs: "When it returned `limit` rows, it examined the range from its start up to and including the last key it returned (for `reverse`, from the last key it returned up to the end of the range)."
    Docs: "Every committed history is serializable: there is an order of the committed transactions such that running them one after another in that order, each starting from the state the previous ones left, every read returns exactly what it returned in the real history, and the database ends in exactly the state the real history left."
    Docs: "A commit in serializable mode is refused with `SerializationError` (a kind of `WriteConflictError`) exactly when the dependency graph of the committed transactions, with the committing transaction added, would contain a cycle."
    Docs: "Whenever no transaction is open, it keeps none, so the tracking never grows beyond what the open transactions can still reach."
    """
    inside = {
        "A": [("scan", "r/", "r0", 1, True), ("put", "w")],
        "B": [("put", "w"), ("put", "r/e")],
    }
    outside = {
        "A": [("scan", "r/", "r0", 1, True), ("put", "w")],
        "B": [("put", "w"), ("put", "r/c")],
    }
    initial = {"r/b": R(1), "r/d": R(2)}
    assert check_all(initial, inside, want_refusal=True) == 70
    assert check_all(initial, outside, want_refusal=False) == 70


def test_a_short_scan_examined_its_whole_range_and_limit_zero_reads_nothing():
    """Docs: "Without `limit`, or when it returned fewer rows than `limit`, it examined the whole range."
    Docs: "A scan with `limit=0` reads nothing."
    Docs: "Every committed history is serializable: there is an order of the committed transactions such that running them one after another in that order, each starting from the state the previous ones left, every read returns exactly what it returned in the real history, and the database ends in exactly the state the real history left."
    Docs: "A commit in serializable mode is refused with `SerializationError` (a kind of `WriteConflictError`) exactly when the dependency graph of the committed transactions, with the committing transaction added, would contain a cycle."
    Docs: "Whenever no transaction is open, it keeps none, so the tracking never grows beyond what the open transactions can still reach."
    """
    short = {
        "A": [("scan", "r/", "r0", 3, False), ("put", "w")],
        "B": [("put", "w"), ("put", "r/z")],
    }
    zero = {
        "A": [("scan", "r/", "r0", 0, False), ("put", "w")],
        "B": [("put", "w"), ("put", "r/a")],
    }
    initial = {"r/b": R(1), "r/d": R(2)}
    assert check_all(initial, short, want_refusal=True) == 70
    assert check_all(initial, zero, want_refusal=False) == 70


def test_a_lookup_depends_on_rows_moving_into_its_term():
    """Docs: "`lookup(index, term)` reads every key under the index's prefix, but it only depends on a version of such a key that is indexed under `term` or that replaced a version indexed under `term`."
    Docs: "Every committed history is serializable: there is an order of the committed transactions such that running them one after another in that order, each starting from the state the previous ones left, every read returns exactly what it returned in the real history, and the database ends in exactly the state the real history left."
    Docs: "A commit in serializable mode is refused with `SerializationError` (a kind of `WriteConflictError`) exactly when the dependency graph of the committed transactions, with the committing transaction added, would contain a cycle."
    Docs: "Whenever no transaction is open, it keeps none, so the tracking never grows beyond what the open transactions can still reach."
    """
    programs = {
        "A": [("lookup", "on"), ("put", "r/c", {"g": "off"})],
        "B": [("lookup", "off"), ("put", "r/b", {"g": "on"})],
    }
    assert check_all({"r/a": R(1, "on"), "r/b": R(2, "off")}, programs, want_refusal=True) == 70


def test_a_lookup_ignores_rows_that_never_had_its_term():
    """Docs: "`lookup(index, term)` reads every key under the index's prefix, but it only depends on a version of such a key that is indexed under `term` or that replaced a version indexed under `term`."
    Docs: "Every committed history is serializable: there is an order of the committed transactions such that running them one after another in that order, each starting from the state the previous ones left, every read returns exactly what it returned in the real history, and the database ends in exactly the state the real history left."
    Docs: "A commit in serializable mode is refused with `SerializationError` (a kind of `WriteConflictError`) exactly when the dependency graph of the committed transactions, with the committing transaction added, would contain a cycle."
    Docs: "Whenever no transaction is open, it keeps none, so the tracking never grows beyond what the open transactions can still reach."
    """
    unrelated = {
        "A": [("lookup", "on"), ("put", "w")],
        "B": [("put", "w"), ("put", "r/b", {"g": "away"})],
    }
    moved_out = {
        "A": [("lookup", "on"), ("put", "w")],
        "B": [("put", "w"), ("put", "r/a", {"g": "away"})],
    }
    initial = {"r/a": R(1, "on"), "r/b": R(2, "off")}
    assert check_all(initial, unrelated, want_refusal=False) == 70
    assert check_all(initial, moved_out, want_refusal=True) == 70


def test_scans_and_lookups_skip_keys_the_transaction_wrote_first():
    """Docs: "A read of a key that the transaction had already written itself (put or delete, before that read) reads its own write and not the database: it adds no edge."
    Docs: "This holds for each key of a scan or lookup as well."
    Docs: "Every committed history is serializable: there is an order of the committed transactions such that running them one after another in that order, each starting from the state the previous ones left, every read returns exactly what it returned in the real history, and the database ends in exactly the state the real history left."
    Docs: "A commit in serializable mode is refused with `SerializationError` (a kind of `WriteConflictError`) exactly when the dependency graph of the committed transactions, with the committing transaction added, would contain a cycle."
    Docs: "Whenever no transaction is open, it keeps none, so the tracking never grows beyond what the open transactions can still reach."
    """
    scan = {
        "A": [("put", "r/b"), ("scan", "r/", "r0", None, False)],
        "B": [("put", "w"), ("put", "r/b")],
    }
    lookup = {
        "A": [("del", "r/a"), ("lookup", "on"), ("put", "w")],
        "B": [("put", "w"), ("put", "r/a", {"g": "on"})],
    }
    initial = {"r/a": R(1, "on"), "r/b": R(2, "off")}
    assert check_all(initial, scan, want_refusal=False) == 70
    assert check_all(initial, lookup, want_refusal=False) == 126


def test_abandoned_transactions_leave_no_dependencies():
    """Docs: "A refused transaction is aborted and leaves nothing behind, neither its writes nor its reads."
    Docs: "It covers read-only transactions too, but only the ones that commit: a transaction that aborts, is refused, or is a snapshot closed without committing has no guarantee about what it read."
    Docs: "Every committed history is serializable: there is an order of the committed transactions such that running them one after another in that order, each starting from the state the previous ones left, every read returns exactly what it returned in the real history, and the database ends in exactly the state the real history left."
    Docs: "A commit in serializable mode is refused with `SerializationError` (a kind of `WriteConflictError`) exactly when the dependency graph of the committed transactions, with the committing transaction added, would contain a cycle."
    Docs: "Whenever no transaction is open, it keeps none, so the tracking never grows beyond what the open transactions can still reach."
    """
    programs = {
        "A": [[("get", "x"), ("put", "y")], ("fail",)],
        "B": [("get", "y"), ("put", "x")],
        "C": [("put", "x")],
    }
    assert check_all({"x": R(1), "y": R(2)}, programs, want_refusal=False) == 4200
