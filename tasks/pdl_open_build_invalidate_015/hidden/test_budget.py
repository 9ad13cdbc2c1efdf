import hashlib
import json
from datetime import datetime

from src.builder import Builder
from src.cache import ArtifactCache
from src.fs import MemoryFS
from src.targets import Project

ROOT = "cache"


class Clock:
    def __init__(self, when):
        self.now = datetime.fromisoformat(when)

    def __call__(self):
        return self.now

    def set(self, when):
        self.now = datetime.fromisoformat(when)


def copy(ctx):
    ctx.write_bytes(ctx.outputs[0], ctx.read_bytes(ctx.inputs[0]))


def project(*names):
    p = Project()
    for name in names:
        p.add(name, copy, inputs=[f"src/{name}.txt"], outputs=[f"out/{name}.bin"])
    return p


def store(cache, when, **contents):
    """A fresh checkout builds the named targets with the given sources."""
    cache.clock.set(when)
    fs = MemoryFS({f"src/{name}.txt": text for name, text in contents.items()})
    return Builder(project(*contents), fs, cache=cache).build()


def key_of(volume, target, content):
    digest = hashlib.sha256(content.encode()).hexdigest()
    prefix = f"{ROOT}/entries/"
    for path in volume.list_files():
        if path.startswith(prefix):
            data = json.loads(volume.read_text(path))
            if data["target"] == target and data["outputs"] == [digest]:
                return path[len(prefix):-5]
    raise AssertionError(f"no entry of {target} holding {content!r}")


def removed(report):
    return [(r.key, r.target, r.reason) for r in report.removed]




def restore(cache, when, **contents):
    """A fresh checkout builds only the named targets; they must come from the cache."""
    result = store(cache, when, **contents)
    assert sorted(result.restored) == sorted(contents)
    return result


def test_budget_evicts_least_recently_used_entries_first():
    """Docs: "Entries are ordered by recency: by `last_used`, then by
    `stored_at`, then by key" and "Entries are evicted one at a time, least
    recently used first, until that size is at most `max_bytes`" and "Every
    restore that writes a target's outputs sets the entry's `last_used`"."""
    from src.retention import RetentionPolicy, prune

    volume = MemoryFS()
    cache = ArtifactCache(volume, ROOT, clock=Clock("2024-01-01T00:00:00+00:00"))
    store(cache, "2024-02-01T00:00:00+00:00", a="1" * 400)
    store(cache, "2024-02-02T00:00:00+00:00", a="2" * 300)
    store(cache, "2024-02-03T00:00:00+00:00", b="3" * 500)
    store(cache, "2024-02-04T00:00:00+00:00", b="4" * 200)
    restore(cache, "2024-02-05T00:00:00+00:00", a="1" * 400)
    a2, b3 = key_of(volume, "a", "2" * 300), key_of(volume, "b", "3" * 500)
    cache.clock.set("2024-02-06T00:00:00+00:00")
    report = prune(cache, RetentionPolicy(max_bytes=1100), dry_run=True)
    assert removed(report) == [(a2, "a", "over budget")]
    assert (report.size_after, report.freed_bytes) == (1100, 300)
    report = prune(cache, RetentionPolicy(max_bytes=1099))
    assert removed(report) == [(a2, "a", "over budget"), (b3, "b", "over budget")]
    assert (report.size_before, report.size_after, report.kept) == (1400, 600, 2)
    assert report.over_budget is False


def test_shared_blobs_count_once_and_evicting_them_may_free_nothing():
    """Docs: "the size checked against the budget is the total size of the
    blobs that the remaining entries refer to, each blob counted once however
    many entries share it." and "An entry whose blobs are all shared with
    remaining entries frees nothing; it is still evicted when its turn
    comes."."""
    from src.retention import RetentionPolicy, prune

    volume = MemoryFS()
    cache = ArtifactCache(volume, ROOT, clock=Clock("2024-01-01T00:00:00+00:00"))
    store(cache, "2024-02-01T00:00:00+00:00", a="x" * 600)
    store(cache, "2024-02-02T00:00:00+00:00", b="x" * 600)
    store(cache, "2024-02-03T00:00:00+00:00", a="y" * 100)
    store(cache, "2024-02-04T00:00:00+00:00", b="z" * 100)
    a1, b1 = key_of(volume, "a", "x" * 600), key_of(volume, "b", "x" * 600)
    cache.clock.set("2024-02-05T00:00:00+00:00")
    report = prune(cache, RetentionPolicy(max_bytes=800))
    assert report.removed == []
    assert (report.size_before, report.kept) == (800, 4)
    report = prune(cache, RetentionPolicy(max_bytes=700))
    assert removed(report) == [(a1, "a", "over budget"), (b1, "b", "over budget")]
    assert (report.size_after, report.freed_bytes, report.kept) == (200, 600, 2)


def test_unreferenced_blobs_count_in_the_report_but_not_against_the_budget():
    """Docs: "Blobs that no remaining entry refers to are deleted", "including
    blobs that nothing referred to before the prune started." and
    "`size_before` and `size_after`: the total size in bytes of all blobs in
    the cache before and after the prune, each blob counted once, blobs that no
    entry refers to included." and "the size checked against the budget is the
    total size of the blobs that the remaining entries refer to"."""
    from src.retention import RetentionPolicy, prune

    volume = MemoryFS()
    cache = ArtifactCache(volume, ROOT, clock=Clock("2024-01-01T00:00:00+00:00"))
    store(cache, "2024-02-01T00:00:00+00:00", a="1" * 300)
    store(cache, "2024-02-02T00:00:00+00:00", a="2" * 200)
    orphan = b"o" * 5000
    volume.write_bytes(f"{ROOT}/objects/{hashlib.sha256(orphan).hexdigest()}", orphan)
    cache.clock.set("2024-02-03T00:00:00+00:00")
    report = prune(cache, RetentionPolicy(max_bytes=500))
    assert report.removed == []
    assert (report.size_before, report.size_after, report.freed_bytes) == (5500, 500, 5000)
    assert report.kept == 2
    assert report.summary() == "pruned 0 entries, freed 4.9 KiB, 2 entries kept"


def test_most_recent_entry_of_each_target_survives_the_budget():
    """Docs: "The most recent entry of each target is never evicted" and "When
    no entry that may be evicted is left and the cache is still over budget,
    the prune stops there and says so in its report." and "When the prune
    stopped over budget, `, still over budget` is appended."."""
    from src.retention import RetentionPolicy, prune

    volume = MemoryFS()
    cache = ArtifactCache(volume, ROOT, clock=Clock("2024-01-01T00:00:00+00:00"))
    store(cache, "2024-02-01T00:00:00+00:00", a="1" * 1000)
    store(cache, "2024-02-02T00:00:00+00:00", a="2" * 1000)
    store(cache, "2024-02-03T00:00:00+00:00", b="3" * 1000)
    a1 = key_of(volume, "a", "1" * 1000)
    cache.clock.set("2024-02-04T00:00:00+00:00")
    report = prune(cache, RetentionPolicy(max_bytes=1500))
    assert removed(report) == [(a1, "a", "over budget")]
    assert report.over_budget is True
    assert report.summary() == (
        "pruned 1 entry (1 over budget), freed 1000 B, 2 entries kept, still over budget"
    )


def test_kept_targets_count_towards_the_budget_but_are_passed_over():
    """Docs: "Entries of the targets named in `keep` are never expired or
    evicted.  They still count towards the budget" and "entries that may not
    be evicted are passed over"."""
    from src.retention import RetentionPolicy, prune

    volume = MemoryFS()
    cache = ArtifactCache(volume, ROOT, clock=Clock("2024-01-01T00:00:00+00:00"))
    store(cache, "2024-02-01T00:00:00+00:00", a="1" * 500)
    store(cache, "2024-02-02T00:00:00+00:00", b="2" * 300)
    store(cache, "2024-02-03T00:00:00+00:00", a="3" * 500)
    store(cache, "2024-02-04T00:00:00+00:00", b="4" * 300)
    store(cache, "2024-02-05T00:00:00+00:00", b="5" * 300)
    b2, b4 = key_of(volume, "b", "2" * 300), key_of(volume, "b", "4" * 300)
    cache.clock.set("2024-02-06T00:00:00+00:00")
    report = prune(cache, RetentionPolicy(max_bytes=1000, keep=["a"]))
    assert removed(report) == [(b2, "b", "over budget"), (b4, "b", "over budget")]
    assert report.over_budget is True
    assert report.kept == 3


def test_ties_in_last_used_fall_back_to_stored_at_then_key():
    """Docs: "Entries are ordered by recency: by `last_used`, then by
    `stored_at`, then by key, all ascending" and "The most recent entry of a
    target is the last of that target's entries in this order."."""
    from src.retention import RetentionPolicy, prune

    volume = MemoryFS()
    cache = ArtifactCache(volume, ROOT, clock=Clock("2024-01-01T00:00:00+00:00"))
    store(cache, "2024-02-01T00:00:00+00:00", a="1" * 100, b="2" * 100)
    store(cache, "2024-02-02T00:00:00+00:00", a="3" * 100, b="4" * 100)
    restore(cache, "2024-02-03T00:00:00+00:00", a="3" * 100)
    restore(cache, "2024-02-03T00:00:00+00:00", a="1" * 100)
    a1, a3 = key_of(volume, "a", "1" * 100), key_of(volume, "a", "3" * 100)
    b2 = key_of(volume, "b", "2" * 100)
    cache.clock.set("2024-02-04T00:00:00+00:00")
    report = prune(cache, RetentionPolicy(max_bytes=100))
    assert removed(report) == [(b2, "b", "over budget"), (a1, "a", "over budget")]
    assert ArtifactCache(volume, ROOT).keys() == sorted([a3, key_of(volume, "b", "4" * 100)])


def test_entries_stored_at_the_same_moment_are_evicted_in_key_order():
    """Docs: "Entries are ordered by recency: by `last_used`, then by
    `stored_at`, then by key, all ascending, so the first entry in this order is
    the least recently used one." and "until that size is at most
    `max_bytes`"."""
    from src.retention import RetentionPolicy, prune

    volume = MemoryFS()
    cache = ArtifactCache(volume, ROOT, clock=Clock("2024-01-01T00:00:00+00:00"))
    store(cache, "2024-02-01T00:00:00+00:00", c="1" * 100, d="2" * 100)
    store(cache, "2024-02-02T00:00:00+00:00", c="3" * 100, d="4" * 100)
    c1, d2 = key_of(volume, "c", "1" * 100), key_of(volume, "d", "2" * 100)
    first, second = sorted([(c1, "c"), (d2, "d")])
    cache.clock.set("2024-02-03T00:00:00+00:00")
    report = prune(cache, RetentionPolicy(max_bytes=300))
    assert removed(report) == [(first[0], first[1], "over budget")]
    report = prune(cache, RetentionPolicy(max_bytes=300))
    assert report.removed == []


def test_a_damaged_most_recent_entry_hands_protection_to_the_previous_one():
    """Docs: "A prune works through four steps in this order, each on the
    entries that are left after the step before" and "The most recent entry of
    each target is never evicted"."""
    from src.retention import RetentionPolicy, prune

    volume = MemoryFS()
    cache = ArtifactCache(volume, ROOT, clock=Clock("2024-01-01T00:00:00+00:00"))
    store(cache, "2024-02-01T00:00:00+00:00", a="1" * 400)
    store(cache, "2024-02-02T00:00:00+00:00", a="2" * 400)
    store(cache, "2024-02-03T00:00:00+00:00", b="3" * 400)
    a2 = key_of(volume, "a", "2" * 400)
    volume.delete(f"{ROOT}/objects/{hashlib.sha256(b'2' * 400).hexdigest()}")
    cache.clock.set("2024-02-04T00:00:00+00:00")
    report = prune(cache, RetentionPolicy(max_bytes=500))
    assert removed(report) == [(a2, "a", "damaged")]
    assert report.over_budget is True
    assert report.kept == 2
    assert report.summary() == (
        "pruned 1 entry (1 damaged), freed 0 B, 2 entries kept, still over budget"
    )


def test_expiry_comes_before_the_budget():
    """Docs: "A prune works through four steps in this order" and "Damaged
    entries come first, then expired ones, each group in key order, then
    evicted entries in the order they were evicted." and "The parenthesis lists
    the reasons that occurred, in the order damaged, expired, over budget"."""
    from src.retention import RetentionPolicy, prune

    volume = MemoryFS()
    cache = ArtifactCache(volume, ROOT, clock=Clock("2024-01-01T00:00:00+00:00"))
    store(cache, "2024-03-01T00:00:00+00:00", a="1" * 1024)
    store(cache, "2024-03-10T00:00:00+00:00", a="2" * 1024)
    store(cache, "2024-03-19T00:00:00+00:00", a="3" * 512, b="4" * 512)
    a1, a2 = key_of(volume, "a", "1" * 1024), key_of(volume, "a", "2" * 1024)
    cache.clock.set("2024-03-20T00:00:00+00:00")
    report = prune(cache, RetentionPolicy(max_age_days=14, max_bytes=1024))
    assert removed(report) == [(a1, "a", "expired"), (a2, "a", "over budget")]
    assert report.summary() == (
        "pruned 2 entries (1 expired, 1 over budget), freed 2.0 KiB, 2 entries kept"
    )
