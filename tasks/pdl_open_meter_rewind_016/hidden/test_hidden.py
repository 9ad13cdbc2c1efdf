"""Acceptance suite: restarts, point-in-time reads and the billing rules behind them.

Scenarios drive live services with manual clocks. Restart scenarios run two
services side by side on separate stores with the same inputs: one is never
stopped, the other is stopped at chosen moments and resumed from its store.
Point-in-time scenarios record what the live engine reported after each
arrival second and ask rewind() for the same moments. Rule scenarios check
figures worked out by hand from the documented prices. Power-loss drills run
services on a simulated disk and cut the power before every disk operation
in turn.
"""

import json
import random
from decimal import Decimal

import pytest

from src.clock import ManualClock
from src.config import config_from_dict
from src.errors import AdmissionRejected, RewindUnavailable
from src.records import CreditGrant, Payment, UsageRecord
from src.service import BillingService
from src.snapshot import list_snapshots
from src.store import DirectoryStore, MemoryStore

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


# -- point-in-time scenarios ---------------------------------------------------------


class Scenario:
    """Drives a live service and remembers what it reported at each arrival second."""

    def __init__(self, config=None, store=None, start=0):
        self.config = config or make_config()
        self.clock = ManualClock(start)
        self.store = store if store is not None else MemoryStore()
        self.service = BillingService(self.config, self.store, self.clock)
        self.history = []
        self._records = 0

    def at(self, moment):
        self.clock.set(moment)
        return self

    def _record(self, entry):
        picture = observe(self.service.engine, self.config)
        if self.history and self.history[-1][0] == entry.arrival:
            self.history[-1] = (entry.arrival, picture, entry.seq)
        else:
            self.history.append((entry.arrival, picture, entry.seq))
        return entry

    def open(self, account, plan="metered"):
        return self._record(self.service.open_account(account, plan))

    def use(self, account, quantity, meter="calls", event_time=None):
        self._records += 1
        when = self.clock.now() if event_time is None else event_time
        return self._record(self.service.submit(record(f"r{self._records}", account, quantity, when, meter)))

    def grant(self, account, grant_id, amount, expires_period=None):
        return self._record(self.service.grant_credit(CreditGrant(grant_id, account, amount, expires_period)))

    def pay(self, account, payment_id, amount):
        return self._record(self.service.record_payment(Payment(payment_id, account, amount)))

    def close(self, account, period):
        return self._record(self.service.close_period(account, period))

    def snapshot(self):
        return self.service.snapshot()

    def snapshots(self):
        return list_snapshots(self.store)

    def live(self, as_of):
        picture = {}
        for arrival, observed, _seq in self.history:
            if arrival > as_of:
                break
            picture = observed
        return picture

    def live_position(self, as_of):
        position = 0
        for arrival, _observed, seq in self.history:
            if arrival > as_of:
                break
            position = seq
        return position

    def check(self, as_of):
        from src.rewind import rewind

        view = rewind(self.config, self.store, as_of)
        assert observe(view, self.config) == self.live(as_of), f"as of {as_of}"
        assert view.position == self.live_position(as_of), f"position as of {as_of}"
        return view


# -- restart scenarios ---------------------------------------------------------------


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


def _long_history(config):
    s = Scenario(config)
    s.at(10).open("acme")
    s.at(12).open("tiny", "fine")
    moment = 20
    while moment < 1500:
        s.at(moment).use("acme" if (moment // 25) % 2 else "tiny", 1)
        moment += 25
    return s


def test_carried_usage_continues_the_tier_position_of_the_open_period():
    """Engine docs: "Usage for a period that has already been closed (it arrived late, after the close) is *carried* into the earliest open period and rated there, continuing that period's tier position like any other usage of the period." """
    source = ManualClock(10)
    service = BillingService(make_config(snapshot_interval=100000), MemoryStore(), source)
    service.open_account("acme", "metered")
    source.set(500)
    service.submit(record("a", "acme", 20, 500))
    source.set(1000)
    service.close_period("acme", 0)
    source.set(1010)
    service.submit(record("b", "acme", 150, 1010))
    assert service.engine.accrued("acme", 1) == D("6.50")
    source.set(1020)
    service.submit(record("late", "acme", 30, 990))
    engine = service.engine
    assert engine.usage("acme", "calls", 1) == D("180")
    assert engine.account_state("acme").periods[1].carried == {"calls": D("30")}
    assert engine.accrued("acme", 1) == D("7.40")


def test_suspension_compares_the_exact_exposure_with_the_limit():
    """README: "Suspension is decided on the exact exposure, never on a rounded figure." """
    source = ManualClock(10)
    service = BillingService(make_config(), MemoryStore(), source)
    service.open_account("hooli", "fine")
    source.set(100)
    service.submit(record("a", "hooli", 800, 100))
    assert service.engine.status("hooli") == "active"
    source.set(150)
    service.submit(record("b", "hooli", 11, 150))
    assert service.engine.exposure("hooli") == D("3.0007")
    assert service.engine.status("hooli") == "suspended"
    assert service.engine.suspended_since("hooli") == 150


def test_rewind_keeps_sub_cent_charges_after_a_snapshot():
    """Issue: "rewind must answer exactly what the engine held at that moment (everything that had arrived by then, including entries that arrived within that very second, and nothing later), or raise RewindUnavailable when the store no longer holds what is needed for it." """
    s = Scenario(make_config(snapshot_interval=100000))
    s.at(10).open("tiny", "fine")
    s.at(40).use("tiny", 7)
    s.at(80).use("tiny", 13)
    ref = s.snapshot()
    assert s.check(ref.taken_at).accrued("tiny") == D("0.074")
    s.at(120).use("tiny", 1)
    assert s.check(120).accrued("tiny") == D("0.0777")


def test_rewind_includes_entries_of_the_snapshot_second_after_it():
    """Issue: "rewind must answer exactly what the engine held at that moment (everything that had arrived by then, including entries that arrived within that very second, and nothing later), or raise RewindUnavailable when the store no longer holds what is needed for it." """
    s = Scenario()
    s.at(10).open("acme")
    s.at(60).use("acme", 5)
    s.at(200).use("acme", 6)
    s.at(200).use("acme", 7)
    s.at(200).pay("acme", "card-1", "0.50")
    s.at(200).use("acme", 2, meter="storage")
    (ref,) = s.snapshots()
    assert (ref.taken_at, ref.position) == (200, 3)
    view = s.check(200)
    assert view.position == 6
    assert view.payments_total("acme") == D("0.50")
    s.check(201)


def test_rewind_refuses_moments_older_than_the_kept_snapshots():
    """Issue: "Asked about a moment from last week, rewind gave us an answer without complaint. The figures turned out to belong to a moment hours later than the one we asked about." """
    from src.rewind import rewind

    s = _long_history(make_config(snapshot_retention=2, segment_max_entries=3))
    refs = s.snapshots()
    assert len(refs) == 2
    assert s.store.keys("journal/")[0] != "journal/segment-000000000001.jsonl"
    with pytest.raises(RewindUnavailable):
        rewind(s.config, s.store, 50)
    with pytest.raises(RewindUnavailable):
        rewind(s.config, s.store, refs[0].taken_at - 1)
    s.check(refs[0].taken_at)


def test_retries_of_records_admitted_before_the_last_snapshot_are_duplicates():
    """Issue: "When the primary died, two producers re-sent their recent batches (events from about 08:40 to 09:05). Some of those records were billed a second time." """
    t = Twin()
    t.at(10).open("acme")
    t.at(150).use("acme", 5, record_id="b-150")
    t.at(180).use("acme", 7, record_id="b-180")
    t.at(200).use("acme", 1, record_id="b-200")
    t.at(250).use("acme", 2, record_id="b-250")
    assert [ref.taken_at for ref in list_snapshots(t.store)] == [200]
    t.at(260).restart()
    for record_id, quantity, event_time in (("b-150", 5, 150), ("b-180", 7, 180), ("b-200", 1, 200), ("b-250", 2, 250)):
        outcome = t.use("acme", quantity, event_time=event_time, record_id=record_id)
        assert outcome == ("rejected", "duplicate")
    t.at(270).use("acme", 3, record_id="b-270")
    assert t.service.engine.usage("acme", "calls") == D("18")
    t.assert_same()


def test_resumed_service_never_stamps_arrivals_before_the_journal():
    """Clock docs: "The arrival clock never does: a reading earlier than the previous stamp is held at the previous stamp, so journal order and arrival order agree."
    Issue: "For that minute every record and command sent to it failed with a journal error about arrival stamps." """
    t = Twin()
    t.at(10).open("acme")
    t.at(300).use("acme", 4)
    t.at(320).use("acme", 4)
    t.restart(host_clock=260)
    entry = t.use("acme", 2, event_time=258)
    assert entry[:3] == ("entry", 4, 320)
    t.pay("acme", "wire-1", "1.00")
    t.at(330).use("acme", 1)
    t.assert_same()


def test_a_busy_day_with_restarts_matches_a_service_that_never_stopped():
    """Issue: "A resumed service must carry on exactly as the old one would have if it had never stopped: the same figures to the last decimal, the same admission decisions, the same arrival stamps, the same snapshots and exports." """
    rng = random.Random(1409)
    t = Twin(make_config(snapshot_interval=150, segment_max_entries=7))
    t.at(5).open("acme")
    t.at(6).open("tiny", "fine")
    t.at(7).open("globex", "unlimited")
    t.at(8).grant("acme", "welcome", "6.00", expires_period=1)
    t.at(9).grant("acme", "apology", "6.00", expires_period=1)
    t.at(9).grant("tiny", "starter", "0.50")
    sent = []
    moment = 10
    payments = 0
    while moment < 3000:
        moment += rng.choice((0, 0, 3, 7, 15, 40))
        t.at(moment)
        roll = rng.random()
        if roll < 0.66:
            account = rng.choice(("acme", "acme", "tiny", "globex"))
            meter = "storage" if account == "acme" and rng.random() < 0.3 else "calls"
            lag = rng.choice((0, 0, 0, 5, 60, 350, -20))
            quantity = rng.choice(("1", "3", "17", "40", "0.5", "120"))
            event_time = max(0, moment - lag)
            record_id = f"u{len(sent) + 1}"
            t.use(account, quantity, meter=meter, event_time=event_time, record_id=record_id)
            sent.append((record_id, account, quantity, meter, event_time))
        elif roll < 0.76:
            payments += 1
            account = rng.choice(("acme", "tiny", "globex"))
            amount = rng.choice(("15.00", "20.00")) if account == "acme" else rng.choice(("0.50", "1.00"))
            t.pay(account, f"pay-{payments}", amount)
        elif roll < 0.88:
            t.close_due()
        elif roll < 0.94:
            t.restart(host_clock=moment - rng.choice((0, 0, 20, 90)))
            for record_id, account, quantity, meter, event_time in sent[-6:]:
                t.use(account, quantity, meter=meter, event_time=event_time, record_id=record_id)
            record_id = f"u{len(sent) + 1}"
            t.use("acme", "2", event_time=max(0, moment - 30), record_id=record_id)
            sent.append((record_id, "acme", "2", "calls", max(0, moment - 30)))
        else:
            t.snapshot()
    assert t.restarts >= 5
    t.assert_same()



# == receivables ======================================================================
#
# Receivables scenarios run on day-scale time: periods of ten days, one snapshot
# per UTC day, figures worked out by hand from the documented prices, terms and
# late fee settings.

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


class Books:
    """A live service on day-scale time."""

    def __init__(self, offset="+00:00", store=None, **options):
        self.config = books_config(offset, **options)
        self.clock = ManualClock(0)
        self.store = store if store is not None else MemoryStore()
        self.service = BillingService(self.config, self.store, self.clock)
        self._records = 0

    def at(self, moment):
        self.clock.set(moment)
        return self

    def open(self, account, plan="standard"):
        return self.service.open_account(account, plan)

    def use(self, account, quantity, event_time=None):
        self._records += 1
        when = self.clock.now() if event_time is None else event_time
        return self.service.submit(record(f"u{self._records}", account, quantity, when))

    def pay(self, account, payment_id, amount):
        return self.service.record_payment(Payment(payment_id, account, amount))

    def grant(self, account, grant_id, amount, expires_period=None):
        return self.service.grant_credit(CreditGrant(grant_id, account, amount, expires_period))

    def close(self, account, period):
        return self.service.close_period(account, period)

    def snapshot(self):
        return self.service.snapshot()

    def report(self, as_of):
        from src.receivables import receivables_report

        return receivables_report(self.config, self.store, as_of)

    def live(self, as_of):
        from src.receivables import build_receivables

        return build_receivables(self.config, self.service.engine, as_of)

    def daily_files(self):
        return self.store.keys("receivables/")

    def daily_file(self, day):
        return json.loads(self.store.get(f"receivables/receivables-{day}.json"))


def figures(line):
    names = ("current", "days_1_30", "days_31_60", "days_61_90", "days_over_90", "late_fees", "unapplied", "unbilled")
    return {name: getattr(line, name) for name in names}


def expect(**given):
    base = {name: D("0") for name in ("current", "days_1_30", "days_31_60", "days_61_90", "days_over_90",
                                      "late_fees", "unapplied", "unbilled")}
    base.update({name: D(value) for name, value in given.items()})
    return base


def unpaid(line):
    return [(invoice.period, invoice.due_on, invoice.days_past_due, invoice.unpaid, invoice.late_fee)
            for invoice in line.invoices]


# -- due dates and billing days ---------------------------------------------------------


def test_due_date_counts_terms_from_the_billing_day_of_issue_east_of_utc():
    """Receivables docs: "An invoice is due on the billing day of its `issued_at`, plus the `payment_terms_days` of the account's plan."
    Receivables docs: "An invoice is current up to and including the last second of its due date, and it is overdue from the first second of the following billing day." """
    b = Books("+05:30")
    b.at(100).open("acme")
    b.at(5 * DAY).use("acme", 500)
    issued = 10 * DAY + 20 * 3600  # 20:00 UTC, 01:30 the next day in the billing time zone
    b.at(issued).close("acme", 0)
    line = b.report(issued + 60).account("acme")
    assert unpaid(line) == [(0, "1970-01-22", 0, D("5.00"), D("0"))]
    assert figures(line) == expect(current="5.00")
    last_second = 22 * DAY - 19800 - 1
    report = b.report(last_second)
    assert report.billing_day == "1970-01-22"
    assert figures(report.account("acme")) == expect(current="5.00")
    report = b.report(last_second + 1)
    assert report.billing_day == "1970-01-23"
    assert unpaid(report.account("acme")) == [(0, "1970-01-22", 1, D("5.00"), D("0"))]
    assert figures(report.account("acme")) == expect(days_1_30="5.00")


def test_billing_days_west_of_utc_start_at_local_midnight():
    """Receivables docs: "`billing_utc_offset` is written `+HH:MM` east of UTC or `-HH:MM` west of it: `+05:30` is five hours and thirty minutes ahead of UTC, and `-03:30` is three hours and thirty minutes behind UTC."
    Receivables docs: "A billing day begins at local midnight, at its first second 00:00:00, and its last second is 23:59:59 local time." """
    from src.invoicing import read_invoice

    b = Books("-03:30")
    b.at(100).open("acme")
    b.at(5 * DAY).use("acme", 500)
    issued = 11 * DAY + 3 * 3600  # 03:00 UTC, 23:30 the day before in the billing time zone
    b.at(issued).close("acme", 0)
    assert read_invoice(b.store, "acme", 0)["issued_on"] == "1970-01-11"
    local_midnight = 21 * DAY + 12600
    line = b.report(local_midnight - 1).account("acme")
    assert unpaid(line) == [(0, "1970-01-21", 0, D("5.00"), D("0"))]
    report = b.report(local_midnight)
    assert report.billing_day == "1970-01-22"
    assert unpaid(report.account("acme")) == [(0, "1970-01-21", 1, D("5.00"), D("0"))]
    assert figures(report.account("acme")) == expect(days_1_30="5.00")


def test_ageing_buckets_include_both_ends():
    """Receivables docs: "`current`, `days_1_30`, `days_31_60`, `days_61_90` and `days_over_90`: the unpaid amounts of the account's invoices, each invoice counted in the one bucket its days past due at `as_of` fall in (0 is current; 1 to 30, 31 to 60 and 61 to 90 include both ends; 91 and more is over 90);"
    Receivables docs: "A plan that sets none of the plan settings gives 30 days to pay and charges no late fees." """
    b = Books()
    b.at(100).open("acme", "relaxed")
    b.at(5 * DAY).use("acme", 300)
    b.at(10 * DAY + 50).close("acme", 0)
    b.at(15 * DAY).use("acme", 700)
    b.at(20 * DAY + 50).close("acme", 1)
    expected = {
        40: expect(current="10.00"),
        70: expect(days_1_30="10.00"),
        71: expect(days_1_30="7.00", days_31_60="3.00"),
        100: expect(days_31_60="10.00"),
        101: expect(days_31_60="7.00", days_61_90="3.00"),
        130: expect(days_61_90="10.00"),
        131: expect(days_61_90="7.00", days_over_90="3.00"),
    }
    for day, wanted in expected.items():
        line = b.report(day * DAY + 3600).account("acme")
        assert figures(line) == wanted, day
    line = b.report(131 * DAY).account("acme")
    assert unpaid(line) == [(0, "1970-02-10", 91, D("3.00"), D("0")), (1, "1970-02-20", 81, D("7.00"), D("0"))]


# -- payments ------------------------------------------------------------------------


def test_payments_go_to_the_earliest_due_invoice_and_leave_the_rest_unapplied():
    """Receivables docs: "The moment a payment is received (its `received_at`), it pays the account's unpaid invoices issued by then, the invoice with the earliest due date first; of two invoices due on the same billing day, the invoice of the earlier period is paid first."
    Receivables docs: "Whatever part of a payment finds no unpaid invoice stays with the account as unapplied cash." """
    b = Books()
    b.at(100).open("acme")
    b.at(5 * DAY).use("acme", 300)
    b.at(10 * DAY + 50).close("acme", 0)
    b.at(15 * DAY).use("acme", 400)
    b.at(20 * DAY + 50).close("acme", 1)
    b.at(21 * DAY).pay("acme", "p1", "5.00")
    line = b.report(21 * DAY + 10).account("acme")
    assert unpaid(line) == [(1, "1970-01-31", 0, D("2.00"), D("0"))]
    assert figures(line) == expect(current="2.00")
    b.at(22 * DAY).pay("acme", "p2", "3.00")
    line = b.report(22 * DAY + 10).account("acme")
    assert line.invoices == ()
    assert figures(line) == expect(unapplied="1.00")


def test_invoices_due_the_same_day_are_paid_in_period_order():
    """Receivables docs: "The moment a payment is received (its `received_at`), it pays the account's unpaid invoices issued by then, the invoice with the earliest due date first; of two invoices due on the same billing day, the invoice of the earlier period is paid first."
    Receivables docs: "`invoices`: its unpaid invoices (`OpenInvoice`: period, issued_at, due_on, days_past_due, total, unpaid, late_fee), in the order payments pay them." """
    b = Books()
    b.at(100).open("acme")
    b.at(5 * DAY).use("acme", 300)
    b.at(15 * DAY).use("acme", 400)
    b.at(20 * DAY + 50)
    b.service.close_due_periods()
    assert [invoice.total for invoice in b.service.engine.invoices("acme")] == [D("3.00"), D("4.00")]
    b.at(21 * DAY).pay("acme", "p1", "4.00")
    line = b.report(40 * DAY).account("acme")
    assert unpaid(line) == [(1, "1970-01-31", 10, D("3.00"), D("0.02"))]
    assert line.invoices[0].total == D("4.00")
    assert figures(line) == expect(days_1_30="3.00", late_fees="0.02")


def test_unapplied_cash_pays_the_next_invoice_the_moment_it_is_issued():
    """Receivables docs: "Payments are allocated to invoices only, never to usage that has not been invoiced yet."
    Receivables docs: "The moment an invoice is issued, the account's unapplied cash pays it, as far as it goes."
    Receivables docs: "Each day's fee is charged at the first second of that billing day, and it is the invoice's unpaid amount at that second times `late_fee_daily_rate`." """
    b = Books()
    b.at(100).open("acme")
    b.at(5 * DAY).use("acme", 3000)
    b.at(6 * DAY).pay("acme", "early", "2.00")
    line = b.report(6 * DAY + 10).account("acme")
    assert line.invoices == ()
    assert figures(line) == expect(unapplied="2.00", unbilled="20.00")
    b.at(10 * DAY + 50).close("acme", 0)
    line = b.report(10 * DAY + 60).account("acme")
    assert unpaid(line) == [(0, "1970-01-21", 0, D("18.00"), D("0"))]
    assert figures(line) == expect(current="18.00")
    line = b.report(26 * DAY).account("acme")
    assert unpaid(line) == [(0, "1970-01-21", 6, D("18.00"), D("0.07"))]
    assert figures(line) == expect(days_1_30="18.00", late_fees="0.07")


def test_a_paid_invoice_leaves_the_report_with_its_late_fees():
    """Receivables docs: "Late fees charged on an invoice are waived when the invoice is paid in full, so they leave the report with it."
    Receivables docs: "An account is listed when at least one of its figures, as the report shows it, is not 0.00; an account with nothing to show is left out." """
    b = Books()
    b.at(100).open("acme")
    b.at(110).open("zed", "relaxed")
    b.at(5 * DAY).use("acme", 987)
    b.at(5 * DAY + 10).use("zed", 3)
    b.at(10 * DAY + 50).close("acme", 0)
    report = b.report(30 * DAY)
    assert report.listed() == ["acme", "zed"]
    assert figures(report.account("acme")) == expect(days_1_30="9.87", late_fees="0.08")
    b.at(30 * DAY + 100).pay("acme", "settle", "9.87")
    report = b.report(30 * DAY + 200)
    assert report.listed() == ["zed"]
    assert report.totals == expect(unbilled="0.03")


def test_an_invoice_covered_by_credit_is_paid_from_the_start():
    """Receivables docs: "An invoice issued with a total of 0.00 (its credits covered it) is paid from the start."
    Receivables docs: "Whatever part of a payment finds no unpaid invoice stays with the account as unapplied cash." """
    b = Books()
    b.at(100).open("acme", "relaxed")
    b.at(200).grant("acme", "welcome", "5.00")
    b.at(5 * DAY).use("acme", 300)
    b.at(10 * DAY + 50).close("acme", 0)
    assert b.service.engine.invoices("acme")[0].total == D("0.00")
    assert b.report(60 * DAY).accounts == ()
    b.at(61 * DAY).pay("acme", "p1", "1.00")
    line = b.report(61 * DAY + 10).account("acme")
    assert line.invoices == ()
    assert figures(line) == expect(unapplied="1.00")


# -- late fees -----------------------------------------------------------------------


def test_grace_days_are_free_and_the_next_day_is_charged():
    """Receivables docs: "An overdue invoice is charged a late fee for every billing day it is overdue, except its first `late_fee_grace_days` days past due: with a grace of 3 days, the days 1, 2 and 3 past due are free and day 4 past due is the first day charged."
    Receivables docs: "Each day's fee is charged at the first second of that billing day, and it is the invoice's unpaid amount at that second times `late_fee_daily_rate`." """
    b = Books()
    b.at(100).open("acme")
    b.at(5 * DAY).use("acme", 987)
    b.at(10 * DAY + 50).close("acme", 0)
    line = b.report(23 * DAY - 1).account("acme")
    assert unpaid(line) == [(0, "1970-01-21", 2, D("9.87"), D("0"))]
    line = b.report(23 * DAY).account("acme")
    assert unpaid(line) == [(0, "1970-01-21", 3, D("9.87"), D("0.01"))]
    line = b.report(25 * DAY).account("acme")
    assert unpaid(line) == [(0, "1970-01-21", 5, D("9.87"), D("0.03"))]
    assert figures(line) == expect(days_1_30="9.87", late_fees="0.03")


def test_a_payment_in_the_first_second_of_a_day_counts_before_that_days_fee():
    """Receivables docs: "A payment received during that very second is counted before the fee is charged."
    Receivables docs: "Each day's fee is charged at the first second of that billing day, and it is the invoice's unpaid amount at that second times `late_fee_daily_rate`." """
    b = Books()
    b.at(100).open("acme")
    b.at(5 * DAY).use("acme", 987)
    b.at(10 * DAY + 50).close("acme", 0)
    b.at(24 * DAY).pay("acme", "midnight", "9.00")
    line = b.report(25 * DAY + 100).account("acme")
    assert unpaid(line) == [(0, "1970-01-21", 5, D("0.87"), D("0.01"))]
    assert figures(line) == expect(days_1_30="0.87", late_fees="0.01")


def test_late_fees_are_charged_at_local_midnight_west_of_utc():
    """Receivables docs: "Each day's fee is charged at the first second of that billing day, and it is the invoice's unpaid amount at that second times `late_fee_daily_rate`."
    Receivables docs: "`billing_utc_offset` is written `+HH:MM` east of UTC or `-HH:MM` west of it: `+05:30` is five hours and thirty minutes ahead of UTC, and `-03:30` is three hours and thirty minutes behind UTC." """
    b = Books("-03:30")
    b.at(100).open("acme")
    b.at(5 * DAY).use("acme", 987)
    b.at(10 * DAY + 50).close("acme", 0)
    b.at(23 * DAY + 3 * 3600).pay("acme", "late-evening", "9.00")  # 23:30 local, still billing day 22
    line = b.report(24 * DAY + 12600).account("acme")
    assert unpaid(line) == [(0, "1970-01-20", 5, D("0.87"), D("0.01"))]
    assert figures(line) == expect(days_1_30="0.87", late_fees="0.01")
    line = b.report(24 * DAY + 12599).account("acme")
    assert unpaid(line) == [(0, "1970-01-20", 4, D("0.87"), D("0.01"))]


def test_late_fees_are_rounded_once_per_invoice():
    """Receivables docs: "Late fees stay exact while they accrue; the report shows each invoice's late fee as the exact sum of its daily fees, rounded to cents (half up) once."
    Receivables docs: "`late_fees`: the sum of the account's invoice late fees as the report shows them;" """
    b = Books()
    b.at(100).open("acme")
    b.at(5 * DAY).use("acme", 53)
    b.at(10 * DAY + 50).close("acme", 0)
    b.at(15 * DAY).use("acme", 230)
    b.at(20 * DAY + 50).close("acme", 1)
    line = b.report(35 * DAY + 10).account("acme")
    assert unpaid(line) == [
        (0, "1970-01-21", 15, D("0.53"), D("0.01")),
        (1, "1970-01-31", 5, D("2.30"), D("0.01")),
    ]
    assert figures(line) == expect(days_1_30="2.83", late_fees="0.02")


def test_the_cap_limits_an_invoices_fees_to_a_fraction_of_its_total():
    """Receivables docs: "When a plan sets `late_fee_cap`, the late fees of one invoice together never exceed `late_fee_cap` times the invoice's total: the day whose fee would pass that limit is charged only what is left below it, and later days are charged nothing."
    Receivables docs: "Each day's fee is charged at the first second of that billing day, and it is the invoice's unpaid amount at that second times `late_fee_daily_rate`." """
    b = Books()
    b.at(100).open("big", "steep")
    b.at(110).open("part", "steep")
    b.at(5 * DAY).use("big", 100)
    b.at(5 * DAY + 10).use("part", 100)
    b.at(10 * DAY + 50).close("big", 0)
    b.at(10 * DAY + 60).close("part", 0)
    b.at(17 * DAY).pay("part", "half", "5.00")
    fees = {}
    for day in (19, 20, 22, 23, 60):
        report = b.report(day * DAY + 10)
        fees[day] = (report.account("big").late_fees, report.account("part").late_fees)
    assert fees == {
        19: (D("0.48"), D("0.30")),
        20: (D("0.50"), D("0.36")),
        22: (D("0.50"), D("0.48")),
        23: (D("0.50"), D("0.50")),
        60: (D("0.50"), D("0.50")),
    }


def test_fees_are_charged_on_the_unpaid_amount_never_on_fees():
    """Receivables docs: "Late fees are charged on the unpaid invoice amount only, never on fees charged earlier."
    Receivables docs: "The days past due of an invoice at a moment are the number of billing days from its due date to the billing day of that moment, so an invoice is 1 day past due on the day after its due date; a current invoice is 0 days past due." """
    b = Books()
    b.at(100).open("acme", "strict")
    b.at(5 * DAY).use("acme", 500)
    b.at(10 * DAY + 50).close("acme", 0)
    line = b.report(11 * DAY - 1).account("acme")
    assert unpaid(line) == [(0, "1970-01-11", 0, D("10.00"), D("0"))]
    line = b.report(11 * DAY).account("acme")
    assert unpaid(line) == [(0, "1970-01-11", 1, D("10.00"), D("0.02"))]
    line = b.report(110 * DAY + 10).account("acme")
    assert unpaid(line) == [(0, "1970-01-11", 100, D("10.00"), D("2.00"))]
    assert figures(line) == expect(days_over_90="10.00", late_fees="2.00")


# -- the report ----------------------------------------------------------------------


def test_accounts_are_ordered_by_their_overdue_amount_then_by_id():
    """Receivables docs: "The listed accounts are ordered by their overdue amount, the sum of the four overdue buckets, largest first; accounts with the same overdue amount are ordered by account id."
    Receivables docs: "An account is listed when at least one of its figures, as the report shows it, is not 0.00; an account with nothing to show is left out." """
    b = Books()
    for offset, (account, plan) in enumerate(
        (("zeta", "strict"), ("alpha", "strict"), ("mid", "strict"), ("beta", "relaxed"), ("gamma", "strict"),
         ("delta", "strict"))
    ):
        b.at(100 + offset).open(account, plan)
    for offset, (account, quantity) in enumerate((("zeta", 250), ("alpha", 450), ("mid", 250), ("beta", 2000))):
        b.at(5 * DAY + offset).use(account, quantity)
    for offset, account in enumerate(("zeta", "alpha", "mid", "beta", "gamma", "delta")):
        b.at(10 * DAY + 50 + offset).close(account, 0)
    b.at(11 * DAY).use("gamma", 5)
    report = b.report(12 * DAY)
    assert report.listed() == ["alpha", "mid", "zeta", "beta", "gamma"]
    assert [line.overdue for line in report.accounts] == [D("9.00"), D("5.00"), D("5.00"), D("0"), D("0")]
    assert figures(report.account("beta")) == expect(current="20.00")
    assert figures(report.account("gamma")) == expect(unbilled="0.10")


def test_totals_add_up_the_figures_of_the_listed_accounts():
    """Receivables docs: "`totals` holds, for each figure, the sum over the listed accounts."
    Receivables docs: "An account is listed when at least one of its figures, as the report shows it, is not 0.00; an account with nothing to show is left out."
    Receivables docs: "`unbilled`: the exact accrued charges of all the account's open periods together, rounded to cents once;" """
    b = Books()
    b.at(100).open("acme")
    b.at(101).open("tiny", "fine")
    b.at(102).open("small", "fine")
    b.at(103).open("beta", "relaxed")
    b.at(5 * DAY).use("acme", 987)
    b.at(5 * DAY + 1).use("tiny", 1)
    b.at(5 * DAY + 2).use("small", 2)
    b.at(6 * DAY).pay("beta", "ahead", "2.00")
    b.at(10 * DAY + 50).close("acme", 0)
    report = b.report(25 * DAY)
    assert report.listed() == ["acme", "beta", "small"]
    assert figures(report.account("small")) == expect(unbilled="0.01")
    assert report.totals == expect(days_1_30="9.87", late_fees="0.03", unapplied="2.00", unbilled="0.01")
    assert report.as_of == 25 * DAY
    assert report.billing_day == "1970-01-26"


def test_unbilled_is_rounded_once_over_all_open_periods_even_after_a_snapshot():
    """Receivables docs: "`unbilled`: the exact accrued charges of all the account's open periods together, rounded to cents once;"
    Receivables docs: "`receivables_report(config, store, as_of)` reports receivables as billing stood at the moment `as_of`: it works from the artifact store, exactly like `rewind`, and raises `RewindUnavailable` when the store no longer holds what is needed for that moment." """
    b = Books()
    b.at(100).open("tiny", "fine")
    b.at(9 * DAY).use("tiny", 1)
    b.at(10 * DAY + 100).use("tiny", 1)
    assert [ref.taken_at for ref in list_snapshots(b.store)] == [9 * DAY, 10 * DAY + 100]
    assert b.service.engine.open_periods("tiny") == (0, 1)
    assert figures(b.live(10 * DAY + 100).account("tiny")) == expect(unbilled="0.01")
    for as_of in (10 * DAY + 100, 10 * DAY + 500):
        assert figures(b.report(as_of).account("tiny")) == expect(unbilled="0.01")


def test_report_from_the_store_counts_a_payment_of_the_snapshot_second():
    """Receivables docs: "`receivables_report(config, store, as_of)` reports receivables as billing stood at the moment `as_of`: it works from the artifact store, exactly like `rewind`, and raises `RewindUnavailable` when the store no longer holds what is needed for that moment."
    Issue: "rewind must answer exactly what the engine held at that moment (everything that had arrived by then, including entries that arrived within that very second, and nothing later), or raise RewindUnavailable when the store no longer holds what is needed for it." """
    b = Books()
    b.at(100).open("acme")
    b.at(5 * DAY).use("acme", 500)
    b.at(10 * DAY + 50).close("acme", 0)
    b.at(20 * DAY).use("acme", 10)
    b.at(20 * DAY).pay("acme", "card", "3.00")
    assert list_snapshots(b.store)[-1].taken_at == 20 * DAY
    line = b.report(20 * DAY).account("acme")
    assert unpaid(line) == [(0, "1970-01-21", 0, D("2.00"), D("0"))]
    assert figures(line) == expect(current="2.00", unbilled="0.10")


def test_report_refuses_moments_the_store_no_longer_holds():
    """Receivables docs: "`receivables_report(config, store, as_of)` reports receivables as billing stood at the moment `as_of`: it works from the artifact store, exactly like `rewind`, and raises `RewindUnavailable` when the store no longer holds what is needed for that moment." """
    b = Books(snapshot_retention=2, segment_max_entries=3)
    b.at(100).open("acme")
    for day in range(1, 30):
        b.at(day * DAY + 10).use("acme", 10)
        if day == 10:
            b.at(day * DAY + 20).close("acme", 0)
    refs = list_snapshots(b.store)
    assert len(refs) == 2
    assert b.store.keys("journal/")[0] != "journal/segment-000000000001.jsonl"
    with pytest.raises(RewindUnavailable):
        b.report(5 * DAY)
    with pytest.raises(RewindUnavailable):
        b.report(refs[0].taken_at - 1)
    line = b.report(29 * DAY + 100).account("acme")
    assert unpaid(line) == [(0, "1970-01-21", 9, D("0.90"), D("0.01"))]
    assert figures(line) == expect(days_1_30="0.90", late_fees="0.01", unbilled="2.00")


def test_report_prices_carried_usage_at_the_open_periods_tier_position():
    """Engine docs: "Usage for a period that has already been closed (it arrived late, after the close) is *carried* into the earliest open period and rated there, continuing that period's tier position like any other usage of the period."
    Receivables docs: "An invoice is due on the billing day of its `issued_at`, plus the `payment_terms_days` of the account's plan." """
    b = Books()
    b.at(100).open("acme")
    b.at(5 * DAY).use("acme", 900)
    b.at(10 * DAY + 50).close("acme", 0)
    b.at(11 * DAY).use("acme", 950)
    b.at(11 * DAY + 100).use("acme", 100, event_time=10 * DAY - 100)
    b.at(20 * DAY + 50).close("acme", 1)
    line = b.report(31 * DAY + 10).account("acme")
    assert unpaid(line) == [
        (0, "1970-01-21", 11, D("9.00"), D("0.08")),
        (1, "1970-01-31", 1, D("10.25"), D("0")),
    ]
    assert figures(line) == expect(days_1_30="19.25", late_fees="0.08")


# -- daily receivables files ---------------------------------------------------------------


def test_the_daily_file_is_written_when_the_next_billing_day_begins():
    """Receivables docs: "When the first journal entry of a later billing day is committed, the service writes the report as of the last second of the billing day of the journal's previous entry; a day without any journal entry gets no file."
    Receivables docs: "The document is JSON with sorted keys; every amount is a string with exactly two decimals:" """
    b = Books("+05:30")
    b.at(100).open("acme")
    b.at(5 * DAY).use("acme", 987)
    b.at(10 * DAY + 50).close("acme", 0)
    day_23 = 23 * DAY - 19800
    b.at(day_23 + 3600).pay("acme", "p1", "1.00")
    b.at(day_23 + 7200).use("acme", 15)
    assert b.daily_files() == [
        "receivables/receivables-1970-01-01.json",
        "receivables/receivables-1970-01-06.json",
        "receivables/receivables-1970-01-11.json",
    ]
    b.at(day_23 + DAY + 10).use("acme", 1)
    assert b.daily_files()[-1] == "receivables/receivables-1970-01-24.json"
    document = b.daily_file("1970-01-24")
    assert (document["kind"], document["version"], document["billing_day"], document["as_of"], document["currency"]) == (
        "meter.receivables",
        1,
        "1970-01-24",
        day_23 + DAY - 1,
        "USD",
    )
    (account,) = document["accounts"]
    assert account["account"] == "acme" and account["plan"] == "standard"
    assert {name: account[name] for name in expect()} == {
        "current": "0.00",
        "days_1_30": "8.87",
        "days_31_60": "0.00",
        "days_61_90": "0.00",
        "days_over_90": "0.00",
        "late_fees": "0.01",
        "unapplied": "0.00",
        "unbilled": "0.15",
    }
    assert account["invoices"] == [
        {
            "period": 0,
            "issued_at": 10 * DAY + 50,
            "due_on": "1970-01-21",
            "days_past_due": 3,
            "total": "9.87",
            "unpaid": "8.87",
            "late_fee": "0.01",
        }
    ]
    assert document["totals"]["days_1_30"] == "8.87" and document["totals"]["unbilled"] == "0.15"


def test_days_without_journal_entries_get_no_file():
    """Receivables docs: "The service keeps one receivables file for every billing day on which a journal entry arrived."
    Receivables docs: "When the first journal entry of a later billing day is committed, the service writes the report as of the last second of the billing day of the journal's previous entry; a day without any journal entry gets no file." """
    b = Books()
    b.at(10 * DAY + 100).open("acme", "strict")
    b.at(10 * DAY + 200).use("acme", 50)
    b.at(12 * DAY).snapshot()
    b.at(14 * DAY + 300).use("acme", 5)
    b.at(14 * DAY + 400).use("acme", 5)
    assert b.daily_files() == ["receivables/receivables-1970-01-11.json"]
    document = b.daily_file("1970-01-11")
    assert document["as_of"] == 11 * DAY - 1
    assert document["accounts"][0]["unbilled"] == "1.00"
    b.at(15 * DAY).pay("acme", "p1", "1.00")
    assert b.daily_files() == ["receivables/receivables-1970-01-11.json", "receivables/receivables-1970-01-15.json"]
    assert b.daily_file("1970-01-15")["accounts"][0]["unbilled"] == "1.20"


def test_a_rejected_record_does_not_end_the_day():
    """Receivables docs: "When the first journal entry of a later billing day is committed, the service writes the report as of the last second of the billing day of the journal's previous entry; a day without any journal entry gets no file." """
    from src.errors import CommandRejected

    b = Books()
    b.at(10 * DAY + 100).open("acme", "strict")
    b.at(10 * DAY + 200).use("acme", 50)
    b.at(11 * DAY + 10)
    with pytest.raises(AdmissionRejected):
        b.use("acme", 5, event_time=5 * DAY)
    with pytest.raises(CommandRejected):
        b.close("acme", 1)
    assert b.daily_files() == []
    b.at(11 * DAY + 20).pay("acme", "p1", "0.40")
    assert b.daily_files() == ["receivables/receivables-1970-01-11.json"]
    document = b.daily_file("1970-01-11")
    assert document["as_of"] == 11 * DAY - 1
    assert document["accounts"][0]["unapplied"] == "0.00"
    assert document["accounts"][0]["unbilled"] == "1.00"


def test_daily_files_are_never_rewritten_nor_removed_by_retention():
    """Receivables docs: "The file of a billing day is written once and never rewritten, and retention never deletes it." """
    store = MemoryStore()
    store.put("receivables/receivables-1970-01-12.json", "kept\n")
    b = Books(store=store, snapshot_retention=1)
    b.at(10 * DAY + 100).open("acme", "strict")
    for day in range(11, 16):
        b.at(day * DAY + 100).use("acme", 10)
    assert b.daily_files() == [f"receivables/receivables-1970-01-{day:02d}.json" for day in range(11, 16)]
    assert store.get("receivables/receivables-1970-01-12.json") == "kept\n"
    assert len(list_snapshots(store)) == 1
    assert b.daily_file("1970-01-13")["accounts"][0]["unbilled"] == "0.40"


def test_daily_files_follow_billing_days_west_of_utc():
    """Receivables docs: "`billing_utc_offset` is written `+HH:MM` east of UTC or `-HH:MM` west of it: `+05:30` is five hours and thirty minutes ahead of UTC, and `-03:30` is three hours and thirty minutes behind UTC."
    Receivables docs: "The key is `receivables/receivables-<billing day>.json`, for example `receivables/receivables-1970-01-31.json`." """
    b = Books("-03:30")
    b.at(10 * DAY + 3 * 3600).open("acme", "strict")
    b.at(10 * DAY + 3 * 3600 + 10).use("acme", 20)
    assert b.daily_files() == []
    b.at(10 * DAY + 3 * 3600 + 45 * 60).use("acme", 30)
    assert b.daily_files() == ["receivables/receivables-1970-01-10.json"]
    document = b.daily_file("1970-01-10")
    assert document["as_of"] == 10 * DAY + 12600 - 1
    assert document["accounts"][0]["unbilled"] == "0.40"


def test_a_resumed_service_writes_the_file_of_the_day_it_took_over():
    """Receivables docs: "When the first journal entry of a later billing day is committed, the service writes the report as of the last second of the billing day of the journal's previous entry; a day without any journal entry gets no file."
    Issue: "A resumed service must carry on exactly as the old one would have if it had never stopped: the same figures to the last decimal, the same admission decisions, the same arrival stamps, the same snapshots and exports." """
    t = Twin(books_config("+05:30"))
    t.at(100).open("acme", "standard")
    t.at(5 * DAY).use("acme", 987)
    t.at(10 * DAY + 50).close("acme", 0)
    t.at(22 * DAY).use("acme", 5)
    t.at(22 * DAY + 40).pay("acme", "p1", "2.00")
    t.restart(host_clock=22 * DAY + 100)
    t.at(23 * DAY).use("acme", 5)
    assert t.store.keys("receivables/")[-1] == "receivables/receivables-1970-01-23.json"
    t.restart(host_clock=23 * DAY - 60)
    t.use("acme", 1, event_time=23 * DAY - 100)
    t.at(24 * DAY).pay("acme", "p2", "1.00")
    assert t.store.keys("receivables/")[-1] == "receivables/receivables-1970-01-24.json"
    t.assert_same()
    document = json.loads(t.store.get("receivables/receivables-1970-01-23.json"))
    assert document["accounts"][0]["days_1_30"] == "7.87"
    assert document["accounts"][0]["late_fees"] == "0.00"


# -- power loss ------------------------------------------------------------------------------
#
# Drills run a list of operations on a DiskStore over a SimDisk. The reference
# run never loses power and records the store's artifacts after every
# operation. A drill run loses power before disk operation k (every k in turn),
# the next node finds what the keep policy left, takes over, and the artifacts
# it finds once resume_service has returned are compared with the reference;
# then it carries on with the remaining operations and must end where the
# reference ended.

from src.errors import CommandRejected  # noqa: E402


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


def appends_drill():
    config = books_config(segment_max_entries=50, snapshot_interval=100 * DAY)
    steps = [
        (100, opening("acme")),
        (200, usage("r1", "acme", 120, 190)),
        (300, usage("r2", "acme", 7, 290)),
        (400, paying("acme", "p1", "0.50")),
        (500, usage("r3", "acme", 33, 480)),
    ]
    return Drill(config, steps)


def rotation_drill():
    config = books_config(segment_max_entries=2, snapshot_interval=100 * DAY)
    steps = [
        (100, opening("acme")),
        (150, opening("bolt", "relaxed")),
        (200, usage("r1", "acme", 10, 190)),
        (250, usage("r2", "bolt", 20, 240)),
        (300, usage("r3", "acme", 30, 290)),
        (350, paying("bolt", "p1", "1.00")),
        (400, usage("r4", "bolt", 40, 390)),
    ]
    return Drill(config, steps)


def closing_drill():
    config = books_config(snapshot_interval=100 * DAY)
    steps = [
        (100, opening("acme")),
        (200, granting("acme", "g1", "2.50", 0)),
        (300, usage("r1", "acme", 987, 250)),
        (10 * DAY + 50, closing("acme", 0)),
        (10 * DAY + 60, paying("acme", "p1", "3.00")),
        (10 * DAY + 70, usage("r2", "acme", 5, 10 * DAY + 65)),
    ]
    return Drill(config, steps)


def snapshot_drill():
    quarter = DAY // 4
    config = books_config(segment_max_entries=2, snapshot_interval=quarter, snapshot_retention=2)
    steps = [
        (100, opening("acme")),
        (200, usage("r1", "acme", 10, 190)),
        (quarter + 100, usage("r2", "acme", 20, quarter + 90)),
        (quarter + 200, usage("r3", "acme", 30, quarter + 190)),
        (2 * quarter + 100, paying("acme", "p1", "0.20")),
        (2 * quarter + 200, usage("r4", "acme", 40, 2 * quarter + 190)),
        (3 * quarter, usage("r5", "acme", 50, 3 * quarter - 10)),
        (3 * quarter + 300, usage("r6", "acme", 60, 3 * quarter + 290)),
    ]
    return Drill(config, steps)


def manual_snapshot_drill():
    config = books_config(segment_max_entries=2, snapshot_interval=100 * DAY, snapshot_retention=1)
    steps = [
        (100, opening("acme")),
        (200, usage("r1", "acme", 10, 190)),
        (300, snapshotting()),
        (400, usage("r2", "acme", 20, 390)),
        (500, usage("r3", "acme", 30, 490)),
        (600, snapshotting()),
        (700, paying("acme", "p1", "0.10")),
        (800, snapshotting()),
    ]
    return Drill(config, steps)


def daily_drill():
    config = books_config("-03:30", snapshot_interval=100 * DAY)
    midnight = 12600  # 00:00:00 local time of 1970-01-01 at -03:30
    steps = [
        (1000, opening("acme", "strict")),
        (midnight - 1, usage("r1", "acme", 50, midnight - 10)),
        (midnight, usage("r2", "acme", 5, midnight - 5)),
        (midnight + 100, usage("r3", "acme", 5, 3 * midnight)),
        (midnight + DAY + 10, paying("acme", "p1", "0.25")),
        (3 * DAY, usage("r4", "acme", 1, 3 * DAY - 10)),
    ]
    return Drill(config, steps)


def busy_drill():
    config = books_config("-03:30", segment_max_entries=3, snapshot_interval=DAY // 2, snapshot_retention=2)
    steps = [
        (100, opening("acme")),
        (200, opening("bolt", "steep")),
        (300, granting("acme", "g1", "1.00", 1)),
        (20000, usage("r1", "acme", 1200, 19000)),
        (30000, usage("r2", "bolt", 30, 29000)),
        (30000, usage("r2", "bolt", 30, 29000)),
        (DAY + 500, paying("bolt", "p1", "1.00")),
        (DAY + 600, snapshotting()),
        (4 * DAY, usage("r3", "bolt", 12, 4 * DAY - 100)),
        (10 * DAY + 100, closing("acme", 0)),
        (10 * DAY + 200, closing("bolt", 0)),
        (10 * DAY + 300, usage("r4", "acme", 40, 10 * DAY - 50)),
        (16 * DAY + 13000, paying("bolt", "p2", "2.00")),
        (17 * DAY, usage("r5", "bolt", 8, 17 * DAY - 5)),
    ]
    return Drill(config, steps)


def test_acknowledged_operations_survive_a_power_loss_between_operations():
    """Durability docs: "Once an operation is acknowledged, everything it wrote is durable: a power loss at any later moment loses none of it."
    Durability docs: "Once it has returned, the store's artifacts (every key `keys()` lists, with its text) are exactly those that a service which never lost power would hold after the same acknowledged operations, or after those and the operation that was in progress when the power was lost: that operation took effect entirely or not at all." """
    drill = busy_drill()
    keep_none = drill.tools["keep_none"]
    checked = 0
    for done in range(len(drill.steps)):
        if drill.ops[done + 1] == drill.ops[done]:
            continue
        disk, in_flight = drill.crash(drill.ops[done] + 1)
        assert in_flight == done
        service, store, _clock = drill.take_over(disk.after_power_loss(keep_none), drill.steps[done][0])
        assert _contents(store) == drill.states[done], f"after operation {done}: {_difference(_contents(store), drill.states[done])}"
        checked += 1
    assert checked >= 13



def test_a_power_loss_before_the_first_entry_is_durable_leaves_a_new_store():
    """Durability docs: "When the power was lost before the first journal entry of the store was durable, the store may list journal artifacts that hold no complete entry."
    Durability docs: "`resume_service` then removes them and returns a service that starts like a new one on an empty store." """
    drill = appends_drill()
    for k in range(1, drill.ops[1] + 1):
        disk, done = drill.crash(k)
        assert done == 0
        for keep in drill.tools["policies"]:
            survivor = disk.after_power_loss(keep)
            service, store = drill.check_takeover(survivor, 0, f"power lost before op {k}, {keep.__name__}")
            assert service.journal.position == len(drill.steps)


def test_every_power_loss_while_appending_to_the_journal():
    """Durability docs: "Once an operation is acknowledged, everything it wrote is durable: a power loss at any later moment loses none of it."
    Durability docs: "Once it has returned, the store's artifacts (every key `keys()` lists, with its text) are exactly those that a service which never lost power would hold after the same acknowledged operations, or after those and the operation that was in progress when the power was lost: that operation took effect entirely or not at all."
    simdisk docstring: "Each file's contents are its durable contents followed by a prefix of the text appended to it since it was last synced: possibly none of that text, possibly all of it, possibly any number of characters in between, decided independently for every file." """
    drill = appends_drill()
    drill.every_power_loss()



def test_every_power_loss_while_the_journal_starts_new_segments():
    """Durability docs: "Once it has returned, the store's artifacts (every key `keys()` lists, with its text) are exactly those that a service which never lost power would hold after the same acknowledged operations, or after those and the operation that was in progress when the power was lost: that operation took effect entirely or not at all."
    Durability docs: "The resumed service then carries on exactly as that service would: the same figures, admission decisions, arrival stamps and artifacts from then on."
    simdisk docstring: "Each file's contents are its durable contents followed by a prefix of the text appended to it since it was last synced: possibly none of that text, possibly all of it, possibly any number of characters in between, decided independently for every file." """
    drill = rotation_drill()
    drill.every_power_loss()



def test_every_power_loss_around_closing_a_period_and_its_invoice_document():
    """Durability docs: "Once it has returned, the store's artifacts (every key `keys()` lists, with its text) are exactly those that a service which never lost power would hold after the same acknowledged operations, or after those and the operation that was in progress when the power was lost: that operation took effect entirely or not at all."
    Durability docs: "The resumed service then carries on exactly as that service would: the same figures, admission decisions, arrival stamps and artifacts from then on." """
    drill = closing_drill()
    assert any(key.startswith("invoices/") for key in drill.states[-1])
    drill.every_power_loss()



def test_every_power_loss_around_snapshots_exports_and_retention():
    """Durability docs: "Once it has returned, the store's artifacts (every key `keys()` lists, with its text) are exactly those that a service which never lost power would hold after the same acknowledged operations, or after those and the operation that was in progress when the power was lost: that operation took effect entirely or not at all."
    Durability docs: "The resumed service then carries on exactly as that service would: the same figures, admission decisions, arrival stamps and artifacts from then on."
    Service docstring: "With ``snapshot_retention`` set, only that many snapshots (and their exports) are kept, and sealed journal segments entirely covered by the oldest kept snapshot are deleted."  """
    drill = snapshot_drill()
    assert len([key for key in drill.states[-1] if key.startswith("snapshots/")]) == 2
    drill.every_power_loss()



def test_every_power_loss_while_an_operator_takes_a_snapshot():
    """Durability docs: "An operation is one call of a `BillingService` method that can write: `submit` (each record of `submit_batch` is an operation of its own), `open_account`, `grant_credit`, `record_payment`, `close_period` (each period that `close_due_periods` closes is an operation of its own) and `snapshot`."
    Durability docs: "Once it has returned, the store's artifacts (every key `keys()` lists, with its text) are exactly those that a service which never lost power would hold after the same acknowledged operations, or after those and the operation that was in progress when the power was lost: that operation took effect entirely or not at all." """
    drill = manual_snapshot_drill()
    drill.every_power_loss()



def test_every_power_loss_around_the_daily_receivables_files():
    """Durability docs: "Once it has returned, the store's artifacts (every key `keys()` lists, with its text) are exactly those that a service which never lost power would hold after the same acknowledged operations, or after those and the operation that was in progress when the power was lost: that operation took effect entirely or not at all."
    Durability docs: "The resumed service then carries on exactly as that service would: the same figures, admission decisions, arrival stamps and artifacts from then on."
    Receivables docs: "The file of a billing day is written once and never rewritten, and retention never deletes it."  """
    drill = daily_drill()
    assert [key for key in drill.states[-1] if key.startswith("receivables/")] == [
        "receivables/receivables-1969-12-31.json",
        "receivables/receivables-1970-01-01.json",
        "receivables/receivables-1970-01-02.json",
    ]
    drill.every_power_loss()



def test_records_retried_after_a_power_loss_are_duplicates_once_their_entry_survived():
    """Durability docs: "Once it has returned, the store's artifacts (every key `keys()` lists, with its text) are exactly those that a service which never lost power would hold after the same acknowledged operations, or after those and the operation that was in progress when the power was lost: that operation took effect entirely or not at all."
    Durability docs: "The resumed service then carries on exactly as that service would: the same figures, admission decisions, arrival stamps and artifacts from then on."
    Recovery docstring: "A resumed service carries on exactly as the one it replaces would have had it never stopped: the same figures, the same admission decisions for the records producers send next (including retries of records that were already admitted), the same arrival stamps and the same snapshots."  """
    drill = rotation_drill()
    drill.every_power_loss(retry=True)



def keep_journal_only(name, unsynced):
    """Power-loss policy: the journal keeps all its unsynced text, every other file none."""
    return len(unsynced) if name.startswith("journal/") else 0


def keep_all_but_the_journal(name, unsynced):
    """Power-loss policy: every file but the journal keeps all its unsynced text."""
    return 0 if name.startswith("journal/") else len(unsynced)


def test_every_power_loss_on_a_busy_day():
    """Durability docs: "Once an operation is acknowledged, everything it wrote is durable: a power loss at any later moment loses none of it."
    Durability docs: "Once it has returned, the store's artifacts (every key `keys()` lists, with its text) are exactly those that a service which never lost power would hold after the same acknowledged operations, or after those and the operation that was in progress when the power was lost: that operation took effect entirely or not at all."
    Durability docs: "The resumed service then carries on exactly as that service would: the same figures, admission decisions, arrival stamps and artifacts from then on."
    simdisk docstring: "Each file's contents are its durable contents followed by a prefix of the text appended to it since it was last synced: possibly none of that text, possibly all of it, possibly any number of characters in between, decided independently for every file." """
    drill = busy_drill()
    drill.every_power_loss(drill.tools["policies"] + (keep_journal_only, keep_all_but_the_journal))



def test_artifacts_are_never_found_in_part_after_a_power_loss():
    """Durability docs: "Snapshots, statements exports, invoice documents and daily receivables files are written whole: whoever reads the store finds each of them either absent or complete, never in part, also after a power loss."  """
    for drill in (closing_drill(), snapshot_drill(), daily_drill()):
        written = {}
        for state in drill.states:
            for key, text in state.items():
                written.setdefault(key, set()).add(text)
        for k in range(1, drill.total + 1):
            disk, _done = drill.crash(k)
            for keep in drill.tools["policies"]:
                store = drill.tools["DiskStore"](disk.after_power_loss(keep))
                for key in store.keys():
                    if key.startswith("journal/"):
                        continue
                    assert store.get(key) in written.get(key, ()), f"{key} found in part (power lost before op {k}, {keep.__name__})"



def test_a_power_loss_during_takeover_of_a_torn_journal():
    """Durability docs: "`resume_service` itself may lose power at any point. The next node calls it again on what survived, and everything above holds for the result."
    Durability docs: "Once it has returned, the store's artifacts (every key `keys()` lists, with its text) are exactly those that a service which never lost power would hold after the same acknowledged operations, or after those and the operation that was in progress when the power was lost: that operation took effect entirely or not at all." """
    drill = rotation_drill()
    tools = drill.tools
    drill.every_power_loss_during_takeover(tools["policies"], (tools["keep_none"], tools["keep_all"]))



def test_a_power_loss_during_takeover_of_an_interrupted_snapshot():
    """Durability docs: "`resume_service` itself may lose power at any point. The next node calls it again on what survived, and everything above holds for the result."
    Durability docs: "Once it has returned, the store's artifacts (every key `keys()` lists, with its text) are exactly those that a service which never lost power would hold after the same acknowledged operations, or after those and the operation that was in progress when the power was lost: that operation took effect entirely or not at all." """
    drill = snapshot_drill()
    tools = drill.tools
    from src.simdisk import keep_all_but_last

    policies = (tools["keep_none"], keep_all_but_last)
    drill.every_power_loss_during_takeover(policies, (tools["keep_none"], tools["keep_all"]))



def test_a_power_loss_during_takeover_on_a_busy_day():
    """Durability docs: "`resume_service` itself may lose power at any point. The next node calls it again on what survived, and everything above holds for the result."
    Durability docs: "Once it has returned, the store's artifacts (every key `keys()` lists, with its text) are exactly those that a service which never lost power would hold after the same acknowledged operations, or after those and the operation that was in progress when the power was lost: that operation took effect entirely or not at all."
    Durability docs: "The resumed service then carries on exactly as that service would: the same figures, admission decisions, arrival stamps and artifacts from then on." """
    drill = busy_drill()
    tools = drill.tools
    from src.simdisk import keep_half

    points = range(drill.ops[9] + 1, drill.ops[13] + 1)
    drill.every_power_loss_during_takeover((keep_half,), (tools["keep_none"], tools["keep_all"]), points)



def test_journal_segments_are_only_ever_appended_to():
    """Durability docs: "The service creates the file of a segment when it starts that segment, and writes the header line and then each entry line by appending them to it; every line, the header included, ends with a newline."
    Durability docs: "A segment is never replaced, renamed or rewritten: the only other changes a segment file ever sees are `resume_service` cutting an incomplete last line off the newest segment (or removing a newest segment that holds no complete entry), and retention deleting whole segments." """
    from src.simdisk import keep_all_but_last

    drill = busy_drill()

    def check(log, existing, takeover_ops):
        known = set(existing)
        for index, (kind, name) in enumerate(log):
            if kind == "rename":
                assert "journal/" not in name, f"journal file renamed: {name}"
                continue
            if not name.startswith("journal/"):
                continue
            if kind == "create":
                assert name not in known, f"{name} created again"
                known.add(name)
            elif kind == "truncate":
                assert index < takeover_ops, f"{name} truncated while the service ran"
            elif kind == "delete":
                known.discard(name)
            else:
                assert kind in ("append", "sync"), (kind, name)

    check(drill.reference_log, (), 0)
    for key, text in drill.states[-1].items():
        if key.startswith("journal/"):
            assert text.endswith("\n") and all(text[:-1].split("\n")), key
    for k in range(1, drill.total + 1):
        disk, done = drill.crash(k)
        for keep in (drill.tools["keep_none"], keep_all_but_last):
            survivor = disk.after_power_loss(keep)
            existing = survivor.names("journal/")
            try:
                drill.check_takeover(survivor, done, f"power lost before op {k}, {keep.__name__}", strict=False)  # noqa
            except Exception:
                pass
            check(survivor.log, existing, drill.takeover_ops)
