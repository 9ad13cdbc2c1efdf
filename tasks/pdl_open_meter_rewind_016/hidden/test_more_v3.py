"""Acceptance suite, part two: takeovers after operator snapshots, retention under power loss, offsets.

Restart scenarios run two services side by side on separate stores with the
same inputs: one is never stopped, the other is stopped at chosen moments and
resumed from its store on a node whose host clock may lag. Power-loss drills
run services on a simulated disk and cut the power before every disk
operation in turn (and, for takeovers, before every operation of the
takeover itself).
"""

import json
from decimal import Decimal

import pytest

from src.clock import ManualClock
from src.config import config_from_dict
from src.errors import AdmissionRejected, CommandRejected, ConfigError
from src.records import CreditGrant, Payment, UsageRecord
from src.service import BillingService
from src.snapshot import list_snapshots
from src.store import MemoryStore

D = Decimal

PLANS = {
    "metered": {
        "meters": {
            "calls": [
                {"up_to": "100", "unit_price": "0.05"},
                {"up_to": "500", "unit_price": "0.03"},
                {"up_to": None, "unit_price": "0.01"},
            ],
            "storage": [{"up_to": None, "unit_price": "0.20"}],
        },
        "suspend_above": "40.00",
        "resume_at": "25.00",
    },
    "fine": {
        "meters": {
            "calls": [
                {"up_to": "1000", "unit_price": "0.0037"},
                {"up_to": None, "unit_price": "0.0011"},
            ]
        },
        "suspend_above": "3.00",
        "resume_at": "1.00",
    },
    "unlimited": {"meters": {"calls": [{"up_to": None, "unit_price": "0.02"}]}},
}


def make_config(**options):
    raw = {
        "period_length": 1000,
        "lateness_window": 400,
        "future_skew": 30,
        "segment_max_entries": 6,
        "snapshot_interval": 200,
        "plans": PLANS,
    }
    raw.update(options)
    return config_from_dict(raw)


def observe(billing, config):
    """Everything support can ask about every account, as comparable values."""
    picture = {}
    for account in billing.accounts():
        meters = sorted(config.plan(billing.plan_of(account)).meters)
        periods = billing.open_periods(account)
        picture[account] = (
            billing.statement(account),
            tuple(
                (period, billing.accrued(account, period), tuple((m, billing.usage(account, m, period)) for m in meters))
                for period in periods
            ),
            billing.grants(account),
            billing.payments_total(account),
            billing.suspended_since(account),
        )
    return picture


def record(record_id, account, quantity, event_time, meter="calls"):
    return UsageRecord(record_id, account, meter, str(quantity), event_time)



def _outcome(call):
    try:
        entry = call()
    except AdmissionRejected as rejection:
        return ("rejected", rejection.reason)
    return ("entry", entry.seq, entry.arrival, entry.kind, tuple(sorted(entry.data.items())))


class Twin:
    """Two services fed the same inputs; ``restart()`` stops and resumes the second one."""

    def __init__(self, config=None, start=0, store=None):
        self.config = config or make_config()
        self.steady_clock = ManualClock(start)
        self.steady_store = MemoryStore()
        self.steady = BillingService(self.config, self.steady_store, self.steady_clock)
        self.store = store if store is not None else MemoryStore()
        self.clock = ManualClock(start)
        self.service = BillingService(self.config, self.store, self.clock)
        self.restarts = 0
        self._records = 0

    def at(self, moment):
        self.steady_clock.set(moment)
        self.clock.set(moment)
        return self

    def restart(self, host_clock=None):
        """Stop the second service and resume one on its store, with a new host clock."""
        from src.recovery import resume_service

        moment = self.clock.now() if host_clock is None else host_clock
        self.clock = ManualClock(moment)
        self.steady_clock.set(moment)
        self.service = resume_service(self.config, self.store, self.clock)
        self.restarts += 1
        return self

    def both(self, action):
        steady = _outcome(lambda: action(self.steady))
        resumed = _outcome(lambda: action(self.service))
        assert resumed == steady
        return resumed

    def open(self, account, plan="metered"):
        return self.both(lambda service: service.open_account(account, plan))

    def use(self, account, quantity, meter="calls", event_time=None, record_id=None):
        if record_id is None:
            self._records += 1
            record_id = f"r{self._records}"
        when = self.clock.now() if event_time is None else event_time
        usage = record(record_id, account, quantity, when, meter)
        return self.both(lambda service: service.submit(usage))

    def grant(self, account, grant_id, amount, expires_period=None):
        return self.both(lambda service: service.grant_credit(CreditGrant(grant_id, account, amount, expires_period)))

    def pay(self, account, payment_id, amount):
        return self.both(lambda service: service.record_payment(Payment(payment_id, account, amount)))

    def close(self, account, period):
        return self.both(lambda service: service.close_period(account, period))

    def close_due(self):
        steady = [entry.seq for entry in self.steady.close_due_periods()]
        resumed = [entry.seq for entry in self.service.close_due_periods()]
        assert resumed == steady

    def snapshot(self):
        steady = self.steady.snapshot()
        resumed = self.service.snapshot()
        assert resumed == steady
        return resumed

    def assert_same(self):
        assert observe(self.service.engine, self.config) == observe(self.steady.engine, self.config)
        assert self.store.keys() == self.steady_store.keys()
        for key in self.steady_store.keys():
            assert self.store.get(key) == self.steady_store.get(key), key


# == billing, rewind and restarts ======================================================


DAY = 86400

RECEIVABLE_PLANS = {
    "standard": {
        "meters": {"calls": [{"up_to": "1000", "unit_price": "0.01"}, {"up_to": None, "unit_price": "0.005"}]},
        "payment_terms_days": 10,
        "late_fee_daily_rate": "0.001",
        "late_fee_grace_days": 2,
        "late_fee_cap": "0.05",
    },
    "strict": {
        "meters": {"calls": [{"up_to": None, "unit_price": "0.02"}]},
        "payment_terms_days": 0,
        "late_fee_daily_rate": "0.002",
    },
    "relaxed": {"meters": {"calls": [{"up_to": None, "unit_price": "0.01"}]}},
    "steep": {
        "meters": {"calls": [{"up_to": None, "unit_price": "0.10"}]},
        "payment_terms_days": 5,
        "late_fee_daily_rate": "0.012",
        "late_fee_cap": "0.05",
    },
    "fine": {"meters": {"calls": [{"up_to": None, "unit_price": "0.0037"}]}, "payment_terms_days": 5},
}


def books_config(offset="+00:00", **options):
    raw = {
        "period_length": 10 * DAY,
        "lateness_window": 2 * DAY,
        "future_skew": 300,
        "segment_max_entries": 6,
        "snapshot_interval": DAY,
        "billing_utc_offset": offset,
        "plans": RECEIVABLE_PLANS,
    }
    raw.update(options)
    return config_from_dict(raw)


# -- power-loss drills (same harness as the first part of the suite) --------------------------

def _disk_tools():
    from src.recovery import resume_service
    from src.simdisk import PowerLoss, SimDisk, keep_all, keep_all_but_last, keep_half, keep_none
    from src.store import DiskStore

    return {
        "resume_service": resume_service,
        "PowerLoss": PowerLoss,
        "SimDisk": SimDisk,
        "DiskStore": DiskStore,
        "policies": (keep_none, keep_all, keep_half, keep_all_but_last),
        "keep_none": keep_none,
        "keep_all": keep_all,
    }


def _contents(store):
    return {key: store.get(key) for key in store.keys()}


def _perform(service, action):
    try:
        action(service)
    except (AdmissionRejected, CommandRejected):
        pass


def _difference(got, want):
    keys = sorted(set(got) | set(want))
    return [key for key in keys if got.get(key) != want.get(key)]


class Drill:
    def __init__(self, config, steps):
        self.tools = _disk_tools()
        self.config = config
        self.steps = steps
        disk = self.tools["SimDisk"]()
        store = self.tools["DiskStore"](disk)
        clock = ManualClock(steps[0][0])
        service = BillingService(config, store, clock)
        self.states = [_contents(store)]
        self.ops = [0]
        for moment, action in steps:
            clock.set(moment)
            _perform(service, action)
            self.states.append(_contents(store))
            self.ops.append(disk.operations)
        self.total = disk.operations
        self.reference_log = list(disk.log)

    def crash(self, k):
        """Run until the power is lost before disk operation ``k``; (disk, operations done)."""
        disk = self.tools["SimDisk"](power_loss_at=k)
        store = self.tools["DiskStore"](disk)
        clock = ManualClock(self.steps[0][0])
        service = BillingService(self.config, store, clock)
        done = 0
        try:
            for moment, action in self.steps:
                clock.set(moment)
                _perform(service, action)
                done += 1
        except self.tools["PowerLoss"]:
            return disk, done
        raise AssertionError(f"the run never reached disk operation {k}")

    def take_over(self, disk, moment):
        store = self.tools["DiskStore"](disk)
        clock = ManualClock(moment)
        if store.keys("journal/"):
            service = self.tools["resume_service"](self.config, store, clock)
        else:
            service = BillingService(self.config, store, clock)
        return service, store, clock

    def check_takeover(self, disk, done, where, retry=False, strict=True):
        """Take over ``disk`` (operation ``done`` was in flight) and check the guarantee."""
        moment = self.steps[done][0]
        service, store, clock = self.take_over(disk, moment)
        self.takeover_ops = len(disk.log)
        got = _contents(store)
        before, after = self.states[done], self.states[done + 1]
        assert got in (before, after) or not strict, (
            f"{where}: in flight: operation {done + 1}; differs from the state without it in "
            f"{_difference(got, before)} and from the state with it in {_difference(got, after)}"
        )
        following = done + 1 if got == after else done
        if retry and following == done + 1 and before != after and getattr(self.steps[done][1], "sends_a_record", False):
            clock.set(moment)
            with pytest.raises(AdmissionRejected):
                self.steps[done][1](service)
            assert _contents(store) == after, f"{where}: a rejected retry changed the store"
        for step_moment, action in self.steps[following:]:
            clock.set(step_moment)
            _perform(service, action)
        final = _contents(store)
        assert final == self.states[-1] or not strict, f"{where}: carrying on ended differently in {_difference(final, self.states[-1])}"
        return service, store

    def every_power_loss(self, policies=None, retry=False):
        policies = policies or self.tools["policies"]
        runs = 0
        for k in range(1, self.total + 1):
            disk, done = self.crash(k)
            for keep in policies:
                self.check_takeover(disk.after_power_loss(keep), done, f"power lost before op {k}, {keep.__name__}", retry)
                runs += 1
        return runs

    def every_power_loss_during_takeover(self, policies, inner_policies, points=None):
        runs = 0
        for k in points or range(1, self.total + 1):
            disk, done = self.crash(k)
            moment = self.steps[done][0]
            for keep in policies:
                probe = disk.after_power_loss(keep)
                self.take_over(probe, moment)
                for j in range(1, probe.operations + 1):
                    first = disk.after_power_loss(keep, power_loss_at=j)
                    try:
                        self.take_over(first, moment)
                    except Exception:
                        pass
                    assert first.lost_power, f"takeover after op {k} was expected to lose power at its op {j}"
                    for inner in inner_policies:
                        where = f"power lost before op {k} ({keep.__name__}), then before takeover op {j} ({inner.__name__})"
                        self.check_takeover(first.after_power_loss(inner), done, where)
                        runs += 1
        return runs


def usage(record_id, account, quantity, event_time):
    def submit(service):
        return service.submit(record(record_id, account, quantity, event_time))

    submit.sends_a_record = True
    return submit


def opening(account, plan="standard"):
    return lambda service: service.open_account(account, plan)


def paying(account, payment_id, amount):
    return lambda service: service.record_payment(Payment(payment_id, account, amount))


def granting(account, grant_id, amount, expires=None):
    return lambda service: service.grant_credit(CreditGrant(grant_id, account, amount, expires))


def closing(account, period):
    return lambda service: service.close_period(account, period)


def snapshotting():
    return lambda service: service.snapshot()



def keep_journal_only(name, unsynced):
    """Power-loss policy: the journal keeps all its unsynced text, every other file none."""
    return len(unsynced) if name.startswith("journal/") else 0


def keep_all_but_the_journal(name, unsynced):
    """Power-loss policy: every file but the journal keeps all its unsynced text."""
    return 0 if name.startswith("journal/") else len(unsynced)



# == takeovers after an operator snapshot ==============================================


def st_johns(day, hours=0, minutes=0):
    """UTC moment of ``hours:minutes`` local time on billing day ``day`` at ``-03:30``."""
    return day * DAY + 12600 + hours * 3600 + minutes * 60


def test_a_takeover_after_an_operator_snapshot_never_stamps_arrivals_before_it():
    """Snapshot docs (src/snapshot.py): "arrival-clock time the snapshot was taken"
    Clock docs (src/clock.py): "The arrival clock never does: a reading earlier than the previous stamp is held at the previous stamp, so journal order and arrival order agree."
    Recovery docs (src/recovery.py): "A resumed service carries on exactly as the one it replaces would have had it never stopped: the same figures, the same admission decisions for the records producers send next (including retries of records that were already admitted), the same arrival stamps and the same snapshots."
    Service docs (src/service.py): "Snapshots are due every ``snapshot_interval`` seconds of arrival time: the first entry whose arrival reaches the next multiple of the interval triggers one, taken right after that entry is applied."
    Issue: "The standby's host clock was about a minute behind the old primary's." """
    t = Twin()
    t.at(10).open("acme")
    t.at(150).use("acme", 5)
    t.at(390).use("acme", 4)
    t.at(410).snapshot()
    t.restart(host_clock=350)
    # 25 s ahead of the stamp the old node gives it, 45 s ahead of the journal's last entry (future_skew is 30)
    outcome = t.use("acme", 2, event_time=435)
    assert outcome[:3] == ("entry", 4, 410)
    assert [(ref.taken_at, ref.position) for ref in list_snapshots(t.store)] == [(390, 3), (410, 3), (410, 4)]
    t.at(415).pay("acme", "card-1", "1.00")
    t.assert_same()


def test_periods_that_ended_before_an_operator_snapshot_close_after_a_lagging_takeover():
    """Service docs (src/service.py): "Close, for every account, each period that has ended; returns the entries."
    Snapshot docs (src/snapshot.py): "arrival-clock time the snapshot was taken"
    Recovery docs (src/recovery.py): "A resumed service carries on exactly as the one it replaces would have had it never stopped: the same figures, the same admission decisions for the records producers send next (including retries of records that were already admitted), the same arrival stamps and the same snapshots." """
    t = Twin()
    t.at(10).open("acme")
    t.at(500).use("acme", 20)
    t.at(990).use("acme", 10)
    t.at(1010).snapshot()
    t.restart(host_clock=950)
    t.close_due()
    invoices = t.service.engine.invoices("acme")
    assert [(invoice.period, invoice.issued_at, invoice.total) for invoice in invoices] == [(0, 1010, D("1.50"))]
    assert t.store.exists("invoices/acme/invoice-000000.json")
    t.assert_same()


def test_a_takeover_lagging_an_operator_snapshot_of_the_next_billing_day_ends_the_previous_day():
    """Receivables docs (docs/receivables.md): "When the first journal entry of a later billing day is committed, the service writes the report as of the last second of the billing day of the journal's previous entry; a day without any journal entry gets no file."
    Snapshot docs (src/snapshot.py): "arrival-clock time the snapshot was taken"
    Issue: "A resumed service must carry on exactly as the old one would have if it had never stopped: the same figures to the last decimal, the same admission decisions, the same arrival stamps, the same snapshots and exports." """
    t = Twin(books_config("-03:30"))
    t.at(st_johns(3, 9, 0)).open("acme", "strict")
    t.at(st_johns(3, 23, 40)).use("acme", 50)
    t.at(st_johns(4, 0, 10)).snapshot()
    assert t.store.keys("receivables/") == []
    t.restart(host_clock=st_johns(3, 23, 55))
    outcome = t.use("acme", 5, event_time=st_johns(3, 23, 50))
    assert outcome[:3] == ("entry", 3, st_johns(4, 0, 10))
    assert t.store.keys("receivables/") == ["receivables/receivables-1970-01-04.json"]
    document = json.loads(t.store.get("receivables/receivables-1970-01-04.json"))
    assert document["as_of"] == st_johns(4) - 1
    assert [(account["account"], account["unbilled"]) for account in document["accounts"]] == [("acme", "1.00")]
    t.at(st_johns(4, 1, 0)).pay("acme", "p1", "0.50")
    t.assert_same()


def test_every_power_loss_around_an_operator_snapshot_before_the_clock_steps_back():
    """Durability docs (docs/durability.md): "The resumed service then carries on exactly as that service would: the same figures, admission decisions, arrival stamps and artifacts from then on."
    Durability docs (docs/durability.md): "An operation is one call of a `BillingService` method that can write: `submit` (each record of `submit_batch` is an operation of its own), `open_account`, `grant_credit`, `record_payment`, `close_period` (each period that `close_due_periods` closes is an operation of its own) and `snapshot`."
    Clock docs (src/clock.py): "The arrival clock never does: a reading earlier than the previous stamp is held at the previous stamp, so journal order and arrival order agree." """
    config = books_config(segment_max_entries=3, snapshot_interval=100 * DAY)
    steps = [
        (100, opening("acme")),
        (200, usage("r1", "acme", 120, 190)),
        (600, snapshotting()),
        (400, usage("r2", "acme", 7, 580)),
        (450, paying("acme", "p1", "0.50")),
        (700, usage("r3", "acme", 33, 690)),
    ]
    drill = Drill(config, steps)
    arrivals = []
    for key, text in sorted(drill.states[-1].items()):
        if key.startswith("journal/"):
            arrivals.extend(json.loads(line)["arrival"] for line in text.splitlines()[1:])
    assert arrivals == [100, 200, 600, 600, 700]
    drill.every_power_loss()


# == retention under power loss ===========================================================


def retention_drill():
    quarter = DAY // 4
    config = books_config(segment_max_entries=2, snapshot_interval=quarter, snapshot_retention=1)
    steps = [
        (100, opening("acme")),
        (200, granting("acme", "g1", "1.00")),
        (quarter + 100, paying("acme", "p1", "0.50")),
        (quarter + 200, paying("acme", "p2", "0.25")),
        (2 * quarter + 100, opening("bolt", "relaxed")),
        (2 * quarter + 200, usage("r1", "acme", 10, 2 * quarter + 190)),
        (3 * quarter + 100, paying("bolt", "p3", "1.00")),
        (3 * quarter + 200, usage("r2", "acme", 20, 3 * quarter + 190)),
    ]
    return Drill(config, steps)


def test_every_power_loss_while_retention_prunes_the_journal():
    """Service docs (src/service.py): "With ``snapshot_retention`` set, only that many snapshots (and their exports) are kept, and sealed journal segments entirely covered by the oldest kept snapshot are deleted."
    Durability docs (docs/durability.md): "Once it has returned, the store's artifacts (every key `keys()` lists, with its text) are exactly those that a service which never lost power would hold after the same acknowledged operations, or after those and the operation that was in progress when the power was lost: that operation took effect entirely or not at all." """
    drill = retention_drill()
    final = drill.states[-1]
    assert len([key for key in final if key.startswith("snapshots/")]) == 1
    assert "journal/segment-000000000001.jsonl" not in final
    assert "journal/segment-000000000001.jsonl" in drill.states[4]
    drill.every_power_loss()


def test_a_power_loss_during_takeover_of_an_interrupted_retention():
    """Durability docs (docs/durability.md): "`resume_service` itself may lose power at any point. The next node calls it again on what survived, and everything above holds for the result."
    Service docs (src/service.py): "With ``snapshot_retention`` set, only that many snapshots (and their exports) are kept, and sealed journal segments entirely covered by the oldest kept snapshot are deleted." """
    from src.simdisk import keep_all_but_last

    drill = retention_drill()
    tools = drill.tools
    points = range(drill.ops[4] + 1, drill.ops[5] + 1)
    runs = drill.every_power_loss_during_takeover((tools["keep_none"], keep_all_but_last), (tools["keep_none"], tools["keep_all"]), points)
    assert runs > 0


# == offsets ================================================================================


def test_offsets_west_of_utc_count_their_minutes_west_too():
    """Billing days docs (src/billing_days.py): "``billing_utc_offset`` in the configuration, written ``"+HH:MM"`` or ``"-HH:MM"`` (hours and minutes east or west of UTC, from ``-12:00`` to ``+14:00``; no daylight saving)."
    Receivables docs (docs/receivables.md): "`billing_utc_offset` is written `+HH:MM` east of UTC or `-HH:MM` west of it: `+05:30` is five hours and thirty minutes ahead of UTC, and `-03:30` is three hours and thirty minutes behind UTC." """
    from src.billing_days import billing_day, iso_day, parse_utc_offset

    assert parse_utc_offset("-00:30") == -1800
    assert parse_utc_offset("-09:30") == -34200
    assert parse_utc_offset("-12:00") == -43200
    with pytest.raises(ValueError):
        parse_utc_offset("-12:30")
    with pytest.raises(ConfigError):
        books_config("-12:45")
    config = books_config("-00:30")
    assert iso_day(billing_day(1799, config.utc_offset)) == "1969-12-31"
    assert iso_day(billing_day(1800, config.utc_offset)) == "1970-01-01"
