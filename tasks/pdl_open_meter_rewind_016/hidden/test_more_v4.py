"""Acceptance suite, part three: producers' retries after a takeover of a store that retention pruned.

Restart scenarios run two services side by side on separate stores with the
same inputs: one is never stopped, the other is stopped at chosen moments and
resumed from its store. Both keep only the most recent snapshots
(snapshot_retention), so the journal segments that hold the records
producers re-send have been deleted by retention, while the records are
still inside the lateness window.
"""

from decimal import Decimal

from src.clock import ManualClock
from src.config import config_from_dict
from src.errors import AdmissionRejected, CommandRejected
from src.records import CreditGrant, Payment, UsageRecord
from src.service import BillingService
from src.snapshot import list_snapshots
from src.store import MemoryStore

D = Decimal
DAY = 86400

PLANS = {
    "metered": {
        "meters": {
            "calls": [
                {"up_to": "100", "unit_price": "0.05"},
                {"up_to": "500", "unit_price": "0.03"},
                {"up_to": None, "unit_price": "0.01"},
            ],
        },
        "suspend_above": "40.00",
        "resume_at": "25.00",
    },
    "standard": {
        "meters": {"calls": [{"up_to": "1000", "unit_price": "0.01"}, {"up_to": None, "unit_price": "0.005"}]},
        "payment_terms_days": 10,
        "late_fee_daily_rate": "0.001",
    },
}


def make_config(**options):
    raw = {
        "period_length": 1000,
        "lateness_window": 400,
        "future_skew": 30,
        "segment_max_entries": 2,
        "snapshot_interval": 50,
        "snapshot_retention": 2,
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


def _outcome(call):
    try:
        entry = call()
    except AdmissionRejected as rejection:
        return ("rejected", rejection.reason)
    except CommandRejected as rejection:
        return ("refused", str(rejection))
    return ("entry", entry.seq, entry.arrival, entry.kind, tuple(sorted(entry.data.items())))


class Twin:
    """Two services fed the same inputs; ``restart()`` stops and resumes the second one."""

    def __init__(self, config):
        self.config = config
        self.steady_clock = ManualClock(0)
        self.steady_store = MemoryStore()
        self.steady = BillingService(self.config, self.steady_store, self.steady_clock)
        self.store = MemoryStore()
        self.clock = ManualClock(0)
        self.service = BillingService(self.config, self.store, self.clock)

    def at(self, moment):
        self.steady_clock.set(moment)
        self.clock.set(moment)
        return self

    def restart(self):
        from src.recovery import resume_service

        self.clock = ManualClock(self.clock.now())
        self.service = resume_service(self.config, self.store, self.clock)
        return self

    def both(self, action):
        steady = _outcome(lambda: action(self.steady))
        resumed = _outcome(lambda: action(self.service))
        assert resumed == steady
        return resumed

    def open(self, account, plan="metered"):
        return self.both(lambda service: service.open_account(account, plan))

    def send(self, record):
        return self.both(lambda service: service.submit(record))

    def send_batch(self, records):
        steady = self.steady.submit_batch(records)
        resumed = self.service.submit_batch(records)
        assert (resumed.admitted, resumed.reasons()) == (steady.admitted, steady.reasons())
        return steady

    def pay(self, account, payment_id, amount):
        return self.both(lambda service: service.record_payment(Payment(payment_id, account, amount)))

    def grant(self, account, grant_id, amount):
        return self.both(lambda service: service.grant_credit(CreditGrant(grant_id, account, amount, None)))

    def assert_same(self):
        assert observe(self.service.engine, self.config) == observe(self.steady.engine, self.config)
        assert self.store.keys() == self.steady_store.keys()
        for key in self.steady_store.keys():
            assert self.store.get(key) == self.steady_store.get(key), key


def calls(record_id, account, quantity, event_time):
    return UsageRecord(record_id, account, "calls", str(quantity), event_time)


def test_a_takeover_of_a_pruned_store_still_rejects_retries_inside_the_lateness_window():
    """Recovery docstring: "A resumed service carries on exactly as the one it replaces would have had it never stopped: the same figures, the same admission decisions for the records producers send next (including retries of records that were already admitted), the same arrival stamps and the same snapshots."
    Issue: "When the primary died, two producers re-sent their recent batches (events from about 08:40 to 09:05). Some of those records were billed a second time."
    Issue: "Production keeps only the most recent snapshots (snapshot_retention) and the journal segments they still need, and rewind, `resume_service` and the receivables report all have to work on such a store." """
    twin = Twin(make_config())
    twin.at(10).open("acme")
    sent = []
    for moment in range(20, 320, 20):
        record = calls(f"r{moment}", "acme", 7, moment - 5)
        twin.at(moment).send(record)
        sent.append(record)
    assert len(list_snapshots(twin.steady_store)) == 2
    twin.at(330).restart()
    for offset, record in enumerate(sent):
        assert twin.at(340 + offset).send(record) == ("rejected", "duplicate")
    twin.at(400).send(calls("fresh", "acme", 3, 395))
    assert twin.service.engine.usage("acme", "calls") == D("108")
    twin.assert_same()


def test_a_resent_batch_after_a_failover_is_not_billed_twice_on_a_store_that_keeps_few_snapshots():
    """Issue: "When the primary died, two producers re-sent their recent batches (events from about 08:40 to 09:05). Some of those records were billed a second time."
    Issue: "A resumed service must carry on exactly as the old one would have if it had never stopped: the same figures to the last decimal, the same admission decisions, the same arrival stamps, the same snapshots and exports."
    Durability docs: "An operation is one call of a `BillingService` method that can write: `submit` (each record of `submit_batch` is an operation of its own), `open_account`, `grant_credit`, `record_payment`, `close_period` (each period that `close_due_periods` closes is an operation of its own) and `snapshot`." """
    hour = 3600
    config = make_config(
        period_length=10 * DAY,
        lateness_window=2 * hour,
        future_skew=300,
        segment_max_entries=3,
        snapshot_interval=hour // 4,
        snapshot_retention=2,
    )
    twin = Twin(config)
    twin.at(8 * hour).open("initech", "standard")
    twin.at(8 * hour + 10).open("hooli", "standard")
    twin.at(8 * hour + 20).grant("hooli", "welcome", "1.00")
    batches = []
    for minute in range(40, 66, 5):
        moment = 8 * hour + minute * 60
        batch = [calls(f"{account}-{minute}", account, 40 + minute, moment - 30) for account in ("initech", "hooli")]
        twin.at(moment).send_batch(batch)
        batches.append(batch)
    twin.at(9 * hour).pay("initech", "card", "0.50")
    twin.at(9 * hour + 4 * 60).send_batch([calls("initech-late", "initech", 9, 9 * hour + 200)])
    assert len(list_snapshots(twin.store)) == 2
    twin.at(9 * hour + 5 * 60).restart()
    resent = [record for batch in batches for record in batch]
    report = twin.at(9 * hour + 6 * 60).send_batch(resent)
    assert report.admitted == []
    assert set(report.reasons().values()) == {"duplicate"}
    twin.at(9 * hour + 7 * 60).send_batch([calls("initech-new", "initech", 5, 9 * hour + 7 * 60)])
    twin.assert_same()
