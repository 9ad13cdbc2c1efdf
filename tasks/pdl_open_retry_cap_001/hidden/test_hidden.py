import pytest

from src.retry import RetryExhausted, RetryPolicy, call_with_retry, retrying


class GuardedSleep:
    """Records pauses; aborts the test if the helper never stops retrying."""

    def __init__(self, limit=25):
        self.delays = []
        self.limit = limit

    def __call__(self, seconds):
        self.delays.append(seconds)
        if len(self.delays) > self.limit:
            raise RuntimeError("still retrying after %d pauses" % self.limit)


class Flaky:
    def __init__(self, *errors, then=None):
        self.errors = list(errors)
        self.then = then
        self.calls = 0

    def __call__(self):
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        if self.then is not None:
            raise self.then()
        return "ok"


def test_timeouts_stop_after_max_attempts():
    """Issue: "After `max_attempts` calls (counting every kind of retryable failure, so a mix of connection errors and timeouts shares the same budget) the helper should raise `RetryExhausted` with `attempts` set and the last `TimeoutError` as `last_error`, without sleeping after the final attempt."

    src/retry.py docstring: "When the attempt budget is spent, :class:`RetryExhausted` is raised with the last error attached (and chained as ``__cause__``)."
    """
    sleep = GuardedSleep()
    op = Flaky(then=lambda: TimeoutError("read timed out"))
    policy = RetryPolicy(max_attempts=4, timeout_delay=0.05)
    with pytest.raises(RetryExhausted) as info:
        call_with_retry(op, policy, sleep=sleep)
    assert op.calls == 4
    assert info.value.attempts == 4
    assert isinstance(info.value.last_error, TimeoutError)
    assert info.value.__cause__ is info.value.last_error
    assert sleep.delays == [0.05, 0.05, 0.05]


def test_timeouts_and_connection_errors_share_one_budget():
    """Issue: "After `max_attempts` calls (counting every kind of retryable failure, so a mix of connection errors and timeouts shares the same budget) the helper should raise `RetryExhausted`…" """
    sleep = GuardedSleep()
    last = TimeoutError("connect timed out")
    op = Flaky(
        ConnectionRefusedError("refused"),
        ConnectionResetError("reset"),
        last,
        then=lambda: TimeoutError("again"),
    )
    policy = RetryPolicy(max_attempts=3, base_delay=0.1, multiplier=2.0, timeout_delay=0.05)
    with pytest.raises(RetryExhausted) as info:
        call_with_retry(op, policy, sleep=sleep)
    assert op.calls == 3
    assert info.value.last_error is last
    assert sleep.delays == [0.1, 0.2]


def test_decorated_call_with_single_attempt_gives_up_on_timeout():
    """Issue: "The short pause we use after a timeout (`timeout_delay`) is fine as it is, and the `@retrying` decorator should behave the same way." """
    sleep = GuardedSleep()
    calls = []

    @retrying(RetryPolicy(max_attempts=1), sleep=sleep)
    def fetch(url):
        calls.append(url)
        raise TimeoutError("read timed out: " + url)

    with pytest.raises(RetryExhausted) as info:
        fetch("https://example.invalid/status")
    assert calls == ["https://example.invalid/status"]
    assert info.value.attempts == 1
    assert sleep.delays == []
