import pytest

from src.errors import RetryExhausted
from src.executors import BulkheadExecutor, FallbackExecutor
from src.facade import Resilience
from src.profiles import Profile
from src.registry import OperationRegistry


class Flaky:
    """Fails ``failures`` times with ``error`` and then returns ``value``."""

    def __init__(self, failures, value="ok", error=ConnectionError):
        self.failures = failures
        self.value = value
        self.error = error
        self.calls = 0

    def __call__(self):
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error(f"failure {self.calls}")
        return self.value


def setup():
    registry = OperationRegistry()
    registry.direct("pricing", Profile(attempts=3))
    inventory = registry.bulkhead("inventory", Profile(attempts=3), limit=4)
    registry.register("quotes", FallbackExecutor(BulkheadExecutor(Profile(attempts=2), limit=2), fallback=list))
    sleeps = []
    return Resilience(registry, sleep=sleeps.append), inventory, sleeps


def test_attempts_override_reaches_bulkhead_operation():
    """Issue: "`attempts=6` on `inventory` should mean up to six calls…" """
    resilience, _, sleeps = setup()
    op = Flaky(failures=5, value=42)
    assert resilience.execute("inventory", op, attempts=6) == 42
    assert op.calls == 6
    assert sleeps == [0.1, 0.2, 0.4, 0.8, 1.6]


def test_attempts_override_can_lower_the_profile():
    """Issue: "Lowering it doesn't work either (`attempts=1` still retries twice)."

    README: "`attempts` counts every call of the operation, the first included."
    """
    resilience, _, sleeps = setup()
    op = Flaky(failures=10)
    with pytest.raises(RetryExhausted) as info:
        resilience.execute("inventory", op, attempts=1)
    assert op.calls == 1
    assert info.value.attempts == 1
    assert sleeps == []


def test_override_applies_to_that_call_only():
    """README: "Per-call options passed to `execute` override the operation's profile for that call only."

    Issue: "…and a later call without `attempts` should be back to the profile's three."
    """
    resilience, _, _ = setup()
    first = Flaky(failures=10)
    with pytest.raises(RetryExhausted):
        resilience.execute("inventory", first, attempts=5)
    second = Flaky(failures=10)
    with pytest.raises(RetryExhausted):
        resilience.execute("inventory", second)
    third = Flaky(failures=10)
    with pytest.raises(RetryExhausted):
        resilience.execute("inventory", third, attempts=2)
    assert (first.calls, second.calls, third.calls) == (5, 3, 2)


def test_fallback_over_bulkhead_honours_attempts():
    """Issue: "Expected: as the README says, the options given to `execute` override the operation's profile for that call only, whatever kind of executor the operation is registered with."

    Issue: "The bulkhead's limit, its statistics and the fallback of `quotes` should keep working as they do now."
    """
    resilience, _, _ = setup()
    op = Flaky(failures=10)
    assert resilience.execute("quotes", op, attempts=4) == []
    assert op.calls == 4
    late = Flaky(failures=3, value=["q-7"])
    assert resilience.execute("quotes", late, attempts=4) == ["q-7"]


def test_retry_accounting_follows_the_override():
    """Issue: "`attempts=6` on `inventory` should mean up to six calls (five retries, each reported to `on_retry` and counted in the bulkhead's `stats`)…" """
    resilience, inventory, _ = setup()
    seen = []
    op = Flaky(failures=10)
    with pytest.raises(RetryExhausted):
        resilience.execute("inventory", op, attempts=6, on_retry=lambda n, e, d: seen.append(n))
    assert seen == [1, 2, 3, 4, 5]
    assert inventory.stats.retries == 5
    assert inventory.stats.calls == 1
