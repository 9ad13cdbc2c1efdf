"""Acceptance suite for point-in-time reads (rewind).

Every scenario drives a live BillingService with a manual clock, records
what the live engine reported after each arrival second, and then asks
rewind() -- working from the artifact store alone -- for the same moments.
The answers must be identical, Decimal for Decimal.
"""

import random
from decimal import Decimal

import pytest

from src.clock import ManualClock
from src.config import config_from_dict
from src.errors import ReadOnlyError, RewindUnavailable, UnknownAccount
from src.journal import read_entries
from src.records import CreditGrant, Payment, UsageRecord
from src.service import BillingService
from src.snapshot import list_snapshots
from src.store import DirectoryStore, MemoryStore

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
        record = UsageRecord(f"r{self._records}", account, meter, str(quantity), when)
        return self._record(self.service.submit(record))

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
        return view


# -- the simple tail -----------------------------------------------------------


def test_tail_replay_of_plain_usage():
    s = Scenario()
    s.at(10).open("acme")
    s.at(20).open("globex")
    for moment in range(30, 200, 20):
        s.at(moment).use("acme", 3)
    s.at(200).use("globex", 2)
    s.at(230).use("acme", 4)
    s.at(260).use("globex", 5, meter="storage")
    s.at(290).use("acme", 1)
    assert [ref.taken_at for ref in s.snapshots()] == [200]
    for as_of in (200, 230, 245, 260, 290, 350):
        s.check(as_of)


def test_as_of_exactly_at_a_snapshot_shows_the_dashboard_figures():
    from src.rewind import rewind

    s = Scenario(make_config(snapshot_interval=100000))
    s.at(10).open("acme")
    s.at(15).open("globex")
    s.at(50).use("acme", 30)
    s.at(120).use("globex", 12, meter="storage")
    s.at(150).pay("globex", "pre-1", "5.00")
    s.at(180).grant("acme", "welcome", "1.25")
    first = s.snapshot()
    s.at(240).use("acme", 7)
    s.at(300).use("globex", 3)
    second = s.snapshot()
    s.at(320).use("acme", 2)
    for ref in (first, second):
        view = rewind(s.config, s.store, ref.taken_at)
        live = s.live(ref.taken_at)
        assert view.accounts() == sorted(live)
        for account, observed in live.items():
            statement = observed[0]
            assert view.balance(account) == statement.balance
            assert view.accrued(account) == statement.accrued
            assert view.credit_remaining(account) == statement.credit_remaining
            assert view.exposure(account) == statement.exposure
            assert view.status(account) == statement.status


def test_entries_in_the_snapshot_second_after_it_are_included():
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
    s.check(199)
    s.check(201)


def test_as_of_before_the_first_snapshot_replays_from_the_start():
    s = Scenario()
    s.at(10).open("acme")
    s.at(40).use("acme", 8)
    s.at(90).open("globex", "unlimited")
    s.at(120).use("globex", 3)
    s.at(150).use("acme", 2, meter="storage")
    s.at(210).use("acme", 4)
    s.at(300).use("globex", 9)
    assert s.snapshots()[0].taken_at == 210
    for as_of in (10, 40, 89, 100, 150, 209):
        s.check(as_of)


def test_as_of_before_any_activity_is_empty():
    from src.rewind import rewind

    s = Scenario(start=500)
    s.at(500).open("acme")
    s.at(550).use("acme", 4)
    s.at(700).use("acme", 4)
    s.at(710).use("acme", 1)
    view = rewind(s.config, s.store, 499)
    assert view.accounts() == []
    assert view.position == 0
    with pytest.raises(UnknownAccount):
        view.balance("acme")


def test_the_latest_snapshot_at_or_before_the_moment_is_used():
    s = Scenario()
    s.at(10).open("acme")
    s.at(15).open("globex", "unlimited")
    moment = 20
    while moment < 1150:
        s.at(moment).use("acme" if moment % 40 else "globex", 1 + moment % 3)
        moment += 35
    assert len(s.snapshots()) >= 4
    for as_of in range(0, 1200, 50):
        s.check(as_of)


# -- rating, closes and grants in the tail ----------------------------------------


def test_tier_boundaries_crossed_in_the_tail():
    s = Scenario(make_config(snapshot_interval=100000))
    s.at(10).open("acme")
    s.at(100).use("acme", 90)
    s.at(150).use("acme", 5)
    s.snapshot()
    s.at(220).use("acme", 30)
    s.at(260).use("acme", 400)
    s.at(300).use("acme", 80)
    for as_of in (150, 220, 260, 300):
        s.check(as_of)


def test_close_and_grant_in_the_tail():
    s = Scenario(make_config(snapshot_interval=100000))
    s.at(10).open("acme")
    s.at(300).use("acme", 60)
    s.snapshot()
    s.at(950).grant("acme", "welcome", "2.50")
    s.at(1005).close("acme", 0)
    s.at(1010).use("acme", 10)
    for as_of in (949, 950, 1004, 1005, 1010):
        s.check(as_of)
    view = s.check(1010)
    (invoice,) = view.invoices("acme")
    assert (invoice.subtotal, invoice.credits_applied, invoice.total) == (
        Decimal("3.00"),
        Decimal("2.50"),
        Decimal("0.50"),
    )


def test_usage_arriving_after_its_period_closed_is_carried_forward():
    s = Scenario(make_config(snapshot_interval=100000))
    s.at(10).open("acme")
    s.at(500).use("acme", 20)
    s.snapshot()
    s.at(1010).close("acme", 0)
    s.at(1020).use("acme", 5, event_time=980)
    s.at(1030).use("acme", 3)
    for as_of in (1010, 1020, 1030):
        s.check(as_of)
    assert s.check(1030).open_periods("acme") == (1,)


def test_grant_expiry_after_a_close_in_the_tail():
    s = Scenario(make_config(snapshot_interval=100000))
    s.at(10).open("acme")
    s.at(20).grant("acme", "promo", "10.00", expires_period=0)
    s.at(30).grant("acme", "loyalty", "5.00")
    s.at(500).use("acme", 60)
    s.snapshot()
    s.at(1010).close("acme", 0)
    s.at(1100).use("acme", 200)
    for as_of in (1009, 1010, 1100):
        s.check(as_of)
    assert s.check(1010).credit_remaining("acme") == Decimal("5.00")


# -- exactness ------------------------------------------------------------------


def test_accrued_is_exact_beyond_display_precision():
    s = Scenario(make_config(snapshot_interval=100000))
    s.at(10).open("tiny", "fine")
    s.at(40).use("tiny", 7)
    s.at(80).use("tiny", 13)
    ref = s.snapshot()
    view = s.check(ref.taken_at)
    assert view.accrued("tiny") == Decimal("0.074")
    assert isinstance(view.accrued("tiny"), Decimal)
    s.at(120).use("tiny", 1)
    assert s.check(120).accrued("tiny") == Decimal("0.0777")


def test_invoice_rounds_the_exact_accrual_not_the_displayed_one():
    s = Scenario(make_config(snapshot_interval=100000))
    s.at(10).open("tiny", "fine")
    s.at(300).use("tiny", 1)
    s.snapshot()
    s.at(600).use("tiny", 1)
    s.at(1001).close("tiny", 0)
    view = s.check(1001)
    assert view.invoices("tiny")[0].subtotal == Decimal("0.01")


def test_suspension_is_decided_on_exact_exposure():
    s = Scenario(make_config(snapshot_interval=100000))
    s.at(10).open("tiny", "fine")
    s.at(100).use("tiny", 809)
    s.snapshot()
    s.at(150).use("tiny", 2)
    for as_of in (100, 149, 150):
        s.check(as_of)
    assert s.check(150).status("tiny") == "suspended"


# -- arrival time, not event time -------------------------------------------------


def test_records_that_arrived_after_the_moment_are_not_included():
    s = Scenario(make_config(snapshot_interval=100000))
    s.at(10).open("acme")
    s.at(100).use("acme", 5)
    s.snapshot()
    s.at(300).use("acme", 4)
    s.at(420).use("acme", 9, event_time=250)
    s.at(450).use("acme", 1)
    for as_of in (250, 300, 419, 420, 450):
        s.check(as_of)


def test_records_stamped_ahead_of_arrival_count_from_arrival():
    s = Scenario(make_config(snapshot_interval=100000))
    s.at(10).open("acme")
    s.at(100).use("acme", 5)
    s.snapshot()
    s.at(300).use("acme", 6, event_time=320)
    s.at(990).use("acme", 2, event_time=1010)
    for as_of in (300, 310, 990, 995):
        s.check(as_of)
    assert s.check(995).open_periods("acme") == (0, 1)


def test_entries_sharing_an_arrival_second_apply_in_journal_order():
    s = Scenario(make_config(snapshot_interval=100000))
    s.at(10).open("acme")
    s.at(900).use("acme", 50)
    s.snapshot()
    s.at(1000).use("acme", 10, event_time=990)
    s.at(1000).close("acme", 0)
    middle = s.snapshot()
    s.at(1000).use("acme", 7, event_time=995)
    s.at(1000).use("acme", 3)
    s.at(1000).pay("acme", "card-1", "1.00")
    assert middle.taken_at == 1000
    s.check(999)
    view = s.check(1000)
    assert view.usage("acme", "calls", 1) == Decimal("10")
    assert view.position == s.live_position(1000)


# -- the support questions --------------------------------------------------------


def test_balance_at_the_moment_of_suspension():
    s = Scenario(make_config(snapshot_interval=100000, snapshot_retention=2, segment_max_entries=2))
    s.at(10).open("acme")
    s.at(100).use("acme", 100)
    s.snapshot()
    s.at(1005).close("acme", 0)
    s.snapshot()
    s.at(1100).use("acme", 400)
    s.at(1200).use("acme", 1200)
    s.at(1300).use("acme", 60, meter="storage")
    s.at(1350).use("acme", 5)
    s.snapshot()
    assert s.store.keys("journal/")[0] != "journal/segment-000000000001.jsonl"
    since = s.service.engine.suspended_since("acme")
    assert since == 1300
    at_suspension = s.check(since)
    assert at_suspension.status("acme") == "suspended"
    assert at_suspension.exposure("acme") == Decimal("45.00")
    assert at_suspension.balance("acme") == Decimal("5.00")
    before = s.check(since - 1)
    assert before.status("acme") == "active"


def test_suspension_holds_until_exposure_reaches_the_resume_threshold():
    s = Scenario(make_config(snapshot_interval=100000, snapshot_retention=2, segment_max_entries=1))
    s.at(10).open("acme")
    s.at(100).use("acme", 230, meter="storage")
    s.snapshot()
    s.at(200).pay("acme", "p1", "10.00")
    s.snapshot()
    s.at(300).pay("acme", "p2", "12.00")
    s.at(400).use("acme", 1, meter="storage")
    s.at(450).snapshot()
    assert [ref.taken_at for ref in s.snapshots()] == [200, 450]
    for as_of in (200, 299, 300, 400, 450):
        s.check(as_of)
    assert s.check(200).status("acme") == "suspended"
    assert s.check(300).status("acme") == "active"


# -- artifacts: segments, retention, stores ---------------------------------------


def test_tail_spanning_rotated_segments():
    s = Scenario(make_config(segment_max_entries=3, snapshot_interval=100000))
    s.at(10).open("acme")
    s.at(20).open("globex", "unlimited")
    s.at(30).use("acme", 2)
    s.at(40).use("globex", 2)
    s.snapshot()
    for index, moment in enumerate(range(50, 400, 25)):
        s.at(moment).use("acme" if index % 2 else "globex", 1 + index % 4)
    assert len(s.store.keys("journal/")) >= 5
    for as_of in range(40, 420, 30):
        s.check(as_of)


def _long_history(config):
    s = Scenario(config)
    s.at(10).open("acme")
    s.at(12).open("globex", "unlimited")
    moment = 20
    while moment < 1500:
        s.at(moment).use("acme" if moment % 50 else "globex", 1)
        moment += 25
    return s


def test_moments_older_than_the_retained_history_are_unavailable():
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


def test_rewind_after_retention_pruned_the_start_of_the_journal():
    s = _long_history(make_config(snapshot_retention=3, segment_max_entries=4))
    refs = s.snapshots()
    assert s.store.keys("journal/")[0] != "journal/segment-000000000001.jsonl"
    for as_of in range(refs[0].taken_at, 1550, 35):
        s.check(as_of)


def test_view_is_read_only_and_reports_where_it_stands():
    from src.rewind import rewind

    s = Scenario()
    s.at(10).open("acme")
    s.at(100).use("acme", 4)
    s.at(220).use("acme", 4)
    s.at(230).use("acme", 4)
    view = rewind(s.config, s.store, 225)
    assert view.as_of == 225
    assert view.position == 3
    entry = list(read_entries(s.store))[-1]
    with pytest.raises(ReadOnlyError):
        view.apply(entry)
    assert view.usage("acme", "calls") == Decimal("8")


def test_rewind_leaves_the_store_and_the_live_engine_alone():
    from src.rewind import rewind

    s = Scenario()
    s.at(10).open("acme")
    s.at(100).use("acme", 20)
    s.at(210).use("acme", 30)
    s.at(260).use("acme", 40)
    before = {key: s.store.get(key) for key in s.store.keys()}
    live_before = observe(s.service.engine, s.config)
    for as_of in (50, 150, 210, 240, 300):
        rewind(s.config, s.store, as_of)
    assert {key: s.store.get(key) for key in s.store.keys()} == before
    assert observe(s.service.engine, s.config) == live_before
    s.at(320).use("acme", 5)
    s.check(320)


def test_rewind_over_a_directory_store(tmp_path):
    s = Scenario(store=DirectoryStore(str(tmp_path / "artifacts")))
    s.at(10).open("acme")
    s.at(50).use("acme", 30)
    s.at(210).use("acme", 20)
    s.at(260).use("acme", 10, meter="storage")
    s.at(300).use("acme", 5)
    for as_of in (60, 210, 260, 305):
        s.check(as_of)


def test_account_opened_after_the_moment_is_unknown():
    s = Scenario()
    s.at(10).open("acme")
    s.at(100).use("acme", 3)
    s.at(250).use("acme", 3)
    s.at(300).open("globex")
    view = s.check(260)
    assert not view.has_account("globex")
    with pytest.raises(UnknownAccount):
        view.exposure("globex")


def test_as_of_past_the_last_entry_matches_the_live_engine_now():
    s = Scenario()
    s.at(10).open("acme")
    s.at(30).open("globex", "unlimited")
    s.at(100).use("acme", 12)
    s.at(250).use("globex", 20)
    s.at(270).use("acme", 3, meter="storage")
    view = s.check(10_000)
    for account in ("acme", "globex"):
        assert view.statement(account) == s.service.engine.statement(account)


def _busy_month(seed=16):
    config = make_config(snapshot_interval=150, snapshot_retention=12, segment_max_entries=7)
    s = Scenario(config)
    rng = random.Random(seed)
    s.at(5).open("acme")
    s.at(6).open("tiny", "fine")
    s.at(7).open("globex", "unlimited")
    s.at(8).grant("acme", "promo", "6.00", expires_period=1)
    s.at(9).grant("tiny", "starter", "0.50")
    moment = 10
    payments = 0
    while moment < 3400:
        moment += rng.choice((0, 0, 3, 7, 15, 40))
        s.at(moment)
        roll = rng.random()
        if roll < 0.70:
            account = rng.choice(("acme", "acme", "tiny", "globex"))
            meter = "storage" if account == "acme" and rng.random() < 0.3 else "calls"
            lag = rng.choice((0, 0, 0, 5, 60, 350, -20))
            quantity = rng.choice(("1", "3", "17", "40", "0.5", "120"))
            s.use(account, quantity, meter=meter, event_time=max(0, moment - lag))
        elif roll < 0.80:
            payments += 1
            account = rng.choice(("acme", "acme", "tiny", "globex"))
            amount = rng.choice(("15.00", "20.00")) if account == "acme" else rng.choice(("0.50", "1.00"))
            s.pay(account, f"pay-{payments}", amount)
        elif roll < 0.93:
            for entry in s.service.close_due_periods():
                s._record(entry)
        else:
            s.snapshot()
    return s


def test_a_busy_month_matches_the_live_engine_at_every_moment():
    s = _busy_month()
    oldest = s.snapshots()[0].taken_at
    moments = sorted({arrival for arrival, _observed, _seq in s.history if arrival >= oldest})
    assert len(moments) > 50
    for as_of in moments:
        s.check(as_of)
        if as_of - 1 >= oldest:
            s.check(as_of - 1)
