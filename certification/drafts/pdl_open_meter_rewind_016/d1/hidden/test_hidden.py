"""Acceptance suite: restarts, point-in-time reads and the billing rules behind them.

Scenarios drive live services with manual clocks. Restart scenarios run two
services side by side on separate stores with the same inputs: one is never
stopped, the other is stopped at chosen moments and resumed from its store.
Point-in-time scenarios record what the live engine reported after each
arrival second and ask rewind() for the same moments. Rule scenarios check
figures worked out by hand from the documented prices.
"""

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


# == billing rules ====================================================================


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


def test_carried_usage_crossing_a_tier_boundary_is_invoiced_at_both_prices():
    """Issue: "It was priced at the first tier although that period was already past it, so late calls cost more than calls that arrived on time." """
    source = ManualClock(10)
    service = BillingService(make_config(snapshot_interval=100000), MemoryStore(), source)
    service.open_account("acme", "metered")
    source.set(1000)
    service.close_period("acme", 0)
    source.set(1100)
    service.submit(record("own", "acme", 480, 1100))
    source.set(1200)
    service.submit(record("late-1", "acme", 50, 900))
    source.set(1300)
    service.submit(record("late-2", "acme", "0.5", 950))
    assert service.engine.accrued("acme", 1) == D("17.305")
    source.set(2000)
    service.close_period("acme", 1)
    (_first, invoice) = service.engine.invoices("acme")
    assert invoice.subtotal == D("17.31")
    assert invoice.carried == (("calls", D("50.5")),)


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


def test_reactivation_waits_until_the_exact_exposure_reaches_the_resume_threshold():
    """Issue: "another account was reactivated while its exposure was still a fraction of a cent above its resume threshold." """
    source = ManualClock(10)
    service = BillingService(make_config(), MemoryStore(), source)
    service.open_account("hooli", "fine")
    source.set(100)
    service.submit(record("a", "hooli", 811, 100))
    assert service.engine.status("hooli") == "suspended"
    source.set(120)
    service.record_payment(Payment("p1", "hooli", "2.00"))
    assert service.engine.exposure("hooli") == D("1.0007")
    assert service.engine.status("hooli") == "suspended"
    assert service.engine.suspended_since("hooli") == 100
    source.set(130)
    service.record_payment(Payment("p2", "hooli", "0.01"))
    assert service.engine.status("hooli") == "active"
    assert service.engine.status_since("hooli") == 130


# == rewind ===========================================================================


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


def test_rewind_invoice_rounds_the_exact_accrual():
    """Issue: "Several invoices the standby issued later are a cent off from what we get by re-pricing the period's usage." """
    s = Scenario(make_config(snapshot_interval=100000))
    s.at(10).open("tiny", "fine")
    s.at(300).use("tiny", 1)
    s.snapshot()
    s.at(600).use("tiny", 1)
    s.at(1001).close("tiny", 0)
    view = s.check(1001)
    assert view.invoices("tiny")[0].subtotal == D("0.01")


def test_rewind_decides_suspension_in_the_tail_on_the_exact_exposure():
    """README: "Suspension is decided on the exact exposure, never on a rounded figure."
    Issue: "rewind must answer exactly what the engine held at that moment (everything that had arrived by then, including entries that arrived within that very second, and nothing later), or raise RewindUnavailable when the store no longer holds what is needed for it." """
    s = Scenario(make_config(snapshot_interval=100000))
    s.at(10).open("tiny", "fine")
    s.at(100).use("tiny", 809)
    s.snapshot()
    s.at(150).use("tiny", 2)
    for as_of in (100, 149, 150):
        s.check(as_of)
    assert s.check(150).status("tiny") == "suspended"
    assert s.check(150).suspended_since("tiny") == 150


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


def _long_history(config):
    s = Scenario(config)
    s.at(10).open("acme")
    s.at(12).open("tiny", "fine")
    moment = 20
    while moment < 1500:
        s.at(moment).use("acme" if (moment // 25) % 2 else "tiny", 1)
        moment += 25
    return s


def test_rewind_works_on_a_store_pruned_by_retention():
    """Issue: "Production keeps only the most recent snapshots (snapshot_retention) and the journal segments they still need, and both tools have to work on such a store." """
    s = _long_history(make_config(snapshot_retention=3, segment_max_entries=4))
    refs = s.snapshots()
    assert s.store.keys("journal/")[0] != "journal/segment-000000000001.jsonl"
    for as_of in range(refs[0].taken_at, 1550, 35):
        s.check(as_of)


def test_rewind_after_a_snapshot_holding_carried_usage():
    """Engine docs: "Usage for a period that has already been closed (it arrived late, after the close) is *carried* into the earliest open period and rated there, continuing that period's tier position like any other usage of the period."
    Issue: "rewind must answer exactly what the engine held at that moment (everything that had arrived by then, including entries that arrived within that very second, and nothing later), or raise RewindUnavailable when the store no longer holds what is needed for it." """
    from src.rewind import rewind

    s = Scenario(make_config(snapshot_interval=100000))
    s.at(10).open("acme")
    s.at(1000).close("acme", 0)
    s.at(1010).use("acme", 150)
    s.at(1020).use("acme", "30.5", event_time=990)
    s.snapshot()
    s.at(1100).use("acme", 10)
    view = rewind(s.config, s.store, 1020)
    assert view.accrued("acme") == D("7.415")
    view = rewind(s.config, s.store, 1100)
    assert view.accrued("acme") == D("7.715")
    assert view.usage("acme", "calls") == D("190.5")


def test_rewind_applies_credits_in_grant_order_in_the_tail():
    """Engine docs: "**Closing** period ``p`` (always the earliest open one) rounds its accrued charges to cents, applies usable grants (earliest expiry first, then in grant order) and adds the rest to the balance as an invoice."
    Issue: "rewind must answer exactly what the engine held at that moment (everything that had arrived by then, including entries that arrived within that very second, and nothing later), or raise RewindUnavailable when the store no longer holds what is needed for it." """
    s = Scenario(make_config(snapshot_interval=100000))
    s.at(10).open("umbrella")
    s.at(20).grant("umbrella", "zeta-goodwill", "2.00", expires_period=3)
    s.at(30).grant("umbrella", "alpha-promo", "2.00", expires_period=3)
    s.at(400).use("umbrella", 60)
    s.snapshot()
    s.at(1001).close("umbrella", 0)
    view = s.check(1001)
    remaining = {grant.grant_id: grant.remaining for grant in view.grants("umbrella")}
    assert remaining == {"zeta-goodwill": D("0"), "alpha-promo": D("1.00")}
    assert [grant.grant_id for grant in view.grants("umbrella")] == ["zeta-goodwill", "alpha-promo"]


def test_rewind_over_a_directory_store(tmp_path):
    """Issue: "rewind must answer exactly what the engine held at that moment (everything that had arrived by then, including entries that arrived within that very second, and nothing later), or raise RewindUnavailable when the store no longer holds what is needed for it." """
    s = Scenario(store=DirectoryStore(str(tmp_path / "artifacts")))
    s.at(10).open("acme")
    s.at(20).open("tiny", "fine")
    s.at(50).use("acme", 30)
    s.at(60).use("tiny", 33)
    s.at(210).use("acme", 20)
    s.at(260).use("tiny", 10)
    s.at(300).use("acme", 5)
    for as_of in (60, 210, 260, 305):
        s.check(as_of)


def test_rewind_past_the_last_entry_matches_the_live_engine_now():
    """Issue: "rewind must answer exactly what the engine held at that moment (everything that had arrived by then, including entries that arrived within that very second, and nothing later), or raise RewindUnavailable when the store no longer holds what is needed for it." """
    s = Scenario()
    s.at(10).open("acme")
    s.at(30).open("tiny", "fine")
    s.at(100).use("acme", 12)
    s.at(150).use("tiny", 41)
    s.at(250).use("tiny", 20)
    s.at(270).use("acme", 3, meter="storage")
    view = s.check(10_000)
    for account in ("acme", "tiny"):
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


def test_a_busy_month_rewinds_to_the_engine_at_every_moment():
    """Issue: "rewind must answer exactly what the engine held at that moment (everything that had arrived by then, including entries that arrived within that very second, and nothing later), or raise RewindUnavailable when the store no longer holds what is needed for it." """
    s = _busy_month()
    oldest = s.snapshots()[0].taken_at
    moments = sorted({arrival for arrival, _observed, _seq in s.history if arrival >= oldest})
    assert len(moments) > 50
    for as_of in moments:
        s.check(as_of)


# == restarts =========================================================================


def test_resumed_service_keeps_exact_open_charges():
    """Issue: "A resumed service must carry on exactly as the old one would have if it had never stopped: the same figures to the last decimal, the same admission decisions, the same arrival stamps, the same snapshots and exports." """
    t = Twin(make_config(snapshot_interval=100000))
    t.at(10).open("tiny", "fine")
    t.at(40).use("tiny", 7)
    t.at(80).use("tiny", 13)
    t.snapshot()
    t.at(90).restart()
    assert t.service.engine.accrued("tiny") == D("0.074")
    t.at(120).use("tiny", 1)
    t.at(1001).close("tiny", 0)
    t.assert_same()
    assert t.service.engine.invoices("tiny")[0].subtotal == D("0.08")


def test_resumed_service_counts_entries_of_the_snapshot_second():
    """Issue: "Initech paid by card at 09:00:00, the same second the hourly snapshot was written." """
    t = Twin()
    t.at(10).open("initech")
    t.at(150).use("initech", 40)
    t.at(200).use("initech", 10)
    t.at(200).pay("initech", "card-0900", "1.50")
    assert [ref.taken_at for ref in list_snapshots(t.store)] == [200]
    t.restart()
    assert t.service.engine.payments_total("initech") == D("1.50")
    assert t.service.engine.balance("initech") == D("-1.50")
    t.at(230).use("initech", 1)
    t.assert_same()


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


def test_snapshots_continue_on_schedule_after_a_restart():
    """Service docs: "Snapshots are due every ``snapshot_interval`` seconds of arrival time: the first entry whose arrival reaches the next multiple of the interval triggers one, taken right after that entry is applied."
    Issue: "A resumed service must carry on exactly as the old one would have if it had never stopped: the same figures to the last decimal, the same admission decisions, the same arrival stamps, the same snapshots and exports." """
    t = Twin()
    t.at(10).open("acme")
    t.at(230).use("acme", 3)
    t.at(350).use("acme", 3)
    t.restart()
    t.at(420).use("acme", 3)
    assert [(ref.taken_at, ref.position) for ref in list_snapshots(t.store)] == [(230, 2), (420, 4)]
    t.at(650).use("acme", 1)
    t.assert_same()


def test_a_restart_before_the_first_snapshot_keeps_the_schedule():
    """Issue: "A resumed service must carry on exactly as the old one would have if it had never stopped: the same figures to the last decimal, the same admission decisions, the same arrival stamps, the same snapshots and exports." """
    t = Twin()
    t.at(10).open("acme")
    t.at(50).use("acme", 2, record_id="early")
    t.at(150).use("acme", 2)
    assert list_snapshots(t.store) == []
    t.restart()
    assert t.use("acme", 2, event_time=50, record_id="early") == ("rejected", "duplicate")
    t.at(210).use("acme", 2)
    assert [ref.taken_at for ref in list_snapshots(t.store)] == [210]
    t.assert_same()


def test_credits_are_used_in_grant_order_after_a_restart():
    """Engine docs: "**Closing** period ``p`` (always the earliest open one) rounds its accrued charges to cents, applies usable grants (earliest expiry first, then in grant order) and adds the rest to the balance as an invoice."
    Issue: "A resumed service must carry on exactly as the old one would have if it had never stopped: the same figures to the last decimal, the same admission decisions, the same arrival stamps, the same snapshots and exports." """
    t = Twin(make_config(snapshot_interval=100000))
    t.at(10).open("umbrella")
    t.at(20).grant("umbrella", "zeta-goodwill", "2.00", expires_period=3)
    t.at(30).grant("umbrella", "alpha-promo", "2.00", expires_period=3)
    t.at(400).use("umbrella", 60)
    t.snapshot()
    t.at(500).restart()
    t.at(1001).close("umbrella", 0)
    remaining = {grant.grant_id: grant.remaining for grant in t.service.engine.grants("umbrella")}
    assert remaining == {"zeta-goodwill": D("0"), "alpha-promo": D("1.00")}
    t.assert_same()


def test_resume_on_a_store_pruned_by_retention():
    """Issue: "Production keeps only the most recent snapshots (snapshot_retention) and the journal segments they still need, and both tools have to work on such a store." """
    t = Twin(make_config(snapshot_retention=2, segment_max_entries=3))
    t.at(10).open("acme")
    t.at(12).open("tiny", "fine")
    moment = 20
    while moment < 900:
        t.at(moment).use("acme" if (moment // 25) % 2 else "tiny", 3)
        moment += 25
    assert t.store.keys("journal/")[0] != "journal/segment-000000000001.jsonl"
    t.at(905).restart()
    t.assert_same()
    t.at(910).use("tiny", 7)
    t.at(1010).close("tiny", 0)
    t.at(1020).use("acme", 4)
    t.assert_same()


def test_carried_usage_survives_a_restart():
    """Engine docs: "Usage for a period that has already been closed (it arrived late, after the close) is *carried* into the earliest open period and rated there, continuing that period's tier position like any other usage of the period."
    Issue: "A resumed service must carry on exactly as the old one would have if it had never stopped: the same figures to the last decimal, the same admission decisions, the same arrival stamps, the same snapshots and exports." """
    t = Twin(make_config(snapshot_interval=100000))
    t.at(10).open("acme")
    t.at(1000).close("acme", 0)
    t.at(1010).use("acme", 150)
    t.at(1020).use("acme", "30.5", event_time=990)
    t.snapshot()
    t.at(1030).restart()
    assert t.service.engine.accrued("acme") == D("7.415")
    t.at(1100).use("acme", 10)
    t.at(2000).close("acme", 1)
    assert t.service.engine.invoices("acme")[-1].subtotal == D("7.72")
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
