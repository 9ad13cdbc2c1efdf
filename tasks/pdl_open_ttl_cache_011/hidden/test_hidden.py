import random

from src.cache import TTLCache
from src.clock import ManualClock
from src.memo import memoize


def test_issue_example_hot_entries_survive_expired_markers():
    """Issue: "Expected: a live entry is only evicted when every slot is held by a live entry; expired entries must give up their slots first, and reclaiming them counts as an expiration, not an eviction."

    Issue: "`max_entries` must remain a hard bound on what the cache stores (we size our pods on it), expired entries included."
    """
    clock = ManualClock(0)
    cache = TTLCache(max_entries=5, default_ttl=300, clock=clock)
    cache.set("config", {"theme": "dark"})
    cache.set("feature-flags", {"beta": True})
    clock.advance(1)
    assert cache.get("config") and cache.get("feature-flags")
    clock.advance(1)
    for user_id in (901, 902, 903):
        cache.set(("profile", user_id), None, ttl=2)
    clock.advance(5)
    cache.set(("profile", 7), {"name": "Ada"})
    assert cache.get("config") == {"theme": "dark"}
    assert cache.get("feature-flags") == {"beta": True}
    assert cache.get(("profile", 7)) == {"name": "Ada"}
    assert cache.stats.evictions == 0
    assert len(cache) <= cache.max_entries


def test_memoized_service_keeps_its_hit_rate_under_negative_lookups():
    """Issue: "Since a crawler started probing random user ids (each probe caches a `None` for 2 seconds) the hit rate on our real, long-lived entries has collapsed: config and popular profiles keep getting reloaded from the database, and `cache.stats.evictions` climbs steadily even though almost everything the crawler put in the cache expired long ago."

    Issue: "`max_entries` must remain a hard bound on what the cache stores (we size our pods on it), expired entries included."
    """
    clock = ManualClock(0)
    cache = TTLCache(max_entries=50, default_ttl=300, clock=clock)
    loads = []

    @memoize(cache, ttl=600, negative_ttl=2)
    def lookup(user_id):
        loads.append(user_id)
        return None if user_id >= 10_000 else {"id": user_id}

    unknown = 10_000
    for second in range(300):
        if second % 10 == 0:
            for user_id in range(1, 6):
                assert lookup(user_id) == {"id": user_id}
        for _ in range(10):
            assert lookup(unknown) is None
            unknown += 1
        clock.advance(1)
        assert len(cache) <= 50
    assert sorted(u for u in loads if u < 10_000) == [1, 2, 3, 4, 5]
    assert cache.stats.evictions == 0


def test_least_recently_used_live_entry_goes_once_expired_ones_are_gone():
    """Issue: "When a live entry does have to go, it is still the least recently used one."

    Issue: "Expected: a live entry is only evicted when every slot is held by a live entry; expired entries must give up their slots first…"
    """
    clock = ManualClock(0)
    cache = TTLCache(max_entries=4, default_ttl=100, clock=clock)
    cache.set("a", 1)
    cache.set("b", 2, ttl=10)
    cache.set("c", 3)
    cache.set("x", 0, ttl=1)
    clock.advance(5)
    assert cache.get("a") == 1 and cache.get("b") == 2
    cache.set("d", 4)
    assert "c" in cache and "x" not in cache
    assert cache.stats.evictions == 0
    clock.advance(1)
    cache.set("e", 5)
    assert "c" not in cache
    assert list(cache.keys()) == ["a", "b", "d", "e"]
    assert cache.stats.evictions == 1


def test_live_entries_are_only_evicted_when_every_slot_is_live():
    """Issue: "Expected: a live entry is only evicted when every slot is held by a live entry…"

    Issue: "When a live entry does have to go, it is still the least recently used one."
    """
    rng = random.Random(11)
    clock = ManualClock(0)
    cache = TTLCache(max_entries=8, default_ttl=30, clock=clock)
    for step in range(3000):
        op = rng.random()
        key = rng.randrange(40)
        if op < 0.45:
            live_before = list(cache.keys())
            evictions_before = cache.stats.evictions
            is_new = key not in live_before
            cache.set(key, step, ttl=rng.choice([1, 2, 5, 30, 120]))
            evicted = cache.stats.evictions - evictions_before
            if evicted:
                assert is_new and len(live_before) == cache.max_entries, step
                assert evicted == 1, step
                victim = live_before[0]
                assert victim not in cache, step
                assert all(k in cache for k in live_before[1:]), step
            assert len(cache) <= cache.max_entries
        elif op < 0.9:
            cache.get(key)
        else:
            clock.advance(rng.choice([0.5, 1, 3, 10]))
