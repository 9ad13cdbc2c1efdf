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




def test_removals_are_listed_damaged_then_expired_each_in_key_order():
    """Docs: "Damaged entries come first, then expired ones, each group in key
    order" and "`target` is `None` for an entry whose file could not be
    decoded." and "An entry is damaged when its file cannot be decoded, or when
    one of its blobs is missing"."""
    from src.retention import RetentionPolicy, prune

    volume = MemoryFS()
    cache = ArtifactCache(volume, ROOT, clock=Clock("2024-01-01T00:00:00+00:00"))
    store(cache, "2024-02-01T00:00:00+00:00", d="dd", e="ee")
    store(cache, "2024-02-02T00:00:00+00:00", c="cc")
    store(cache, "2024-02-03T00:00:00+00:00", f="ff")
    store(cache, "2024-03-01T00:00:00+00:00", g="gg")
    keys = {name: key_of(volume, name, name * 2) for name in "cdefg"}
    volume.write_text(f"{ROOT}/entries/{keys['f']}.json", "{\"target\": ")
    volume.delete(f"{ROOT}/objects/{hashlib.sha256(b'ee').hexdigest()}")
    cache.clock.set("2024-03-02T00:00:00+00:00")
    report = prune(cache, RetentionPolicy(max_age_days=7))
    damaged = sorted([(keys["f"], None, "damaged"), (keys["e"], "e", "damaged")])
    expired = sorted([(keys["c"], "c", "expired"), (keys["d"], "d", "expired")])
    assert removed(report) == damaged + expired
    assert ArtifactCache(volume, ROOT).keys() == [keys["g"]]
    assert report.summary() == "pruned 4 entries (2 damaged, 2 expired), freed 6 B, 1 entry kept"


def test_summary_rounds_halves_up_in_kib():
    """Docs: "a size under 1024 KiB in KiB, and anything larger in MiB, both of
    these with one decimal." and "the number is rounded once, from the exact
    byte count, halves rounded up: 1280 bytes is `1.3 KiB`." and ""entry" is
    singular for a count of one"."""
    from src.retention import RetentionPolicy, prune

    volume = MemoryFS()
    cache = ArtifactCache(volume, ROOT, clock=Clock("2024-01-01T00:00:00+00:00"))
    store(cache, "2024-02-01T00:00:00+00:00", a="1" * 1280)
    store(cache, "2024-02-20T00:00:00+00:00", b="2" * 3)
    cache.clock.set("2024-02-21T00:00:00+00:00")
    report = prune(cache, RetentionPolicy(max_age_days=10))
    assert report.freed_bytes == 1280
    assert report.summary() == "pruned 1 entry (1 expired), freed 1.3 KiB, 1 entry kept"


def test_summary_unit_is_chosen_from_the_exact_byte_count():
    """Docs: "A size under 1024 bytes is written in bytes (`512 B`), a size
    under 1024 KiB in KiB, and anything larger in MiB, both of these with one
    decimal.  The unit is chosen from the exact byte count, and the number is
    rounded once, from the exact byte count, halves rounded up"."""
    from src.retention import RetentionPolicy, prune

    volume = MemoryFS()
    cache = ArtifactCache(volume, ROOT, clock=Clock("2024-01-01T00:00:00+00:00"))
    store(cache, "2024-02-01T00:00:00+00:00", a="1" * (1024 * 1024 - 1))
    store(cache, "2024-02-10T00:00:00+00:00", b="2" * (1024 * 1280))
    store(cache, "2024-02-20T00:00:00+00:00", c="3" * 1023)
    cache.clock.set("2024-02-21T00:00:00+00:00")
    report = prune(cache, RetentionPolicy(max_age_days=15))
    assert report.summary() == "pruned 1 entry (1 expired), freed 1024.0 KiB, 2 entries kept"
    report = prune(cache, RetentionPolicy(max_age_days=5))
    assert report.summary() == "pruned 1 entry (1 expired), freed 1.3 MiB, 1 entry kept"
    report = prune(cache, RetentionPolicy(max_age_days=0))
    assert report.summary() == "pruned 1 entry (1 expired), freed 1023 B, 0 entries kept"


def snapshot(volume):
    return {path: volume.read_bytes(path) for path in volume.list_files()}


def test_dry_run_changes_nothing_and_reports_what_the_prune_would_do():
    """Docs: "With `dry_run=True` a prune changes nothing at all (no entry file
    or blob is deleted or rewritten, damaged ones included) and returns the
    report the same prune would have produced without it; its summary starts
    with `dry run: `."."""
    from src.retention import RetentionPolicy, prune

    volume = MemoryFS()
    cache = ArtifactCache(volume, ROOT, clock=Clock("2024-01-01T00:00:00+00:00"))
    store(cache, "2024-02-01T00:00:00+00:00", a="1" * 700, b="2" * 50)
    store(cache, "2024-02-15T00:00:00+00:00", a="3" * 700)
    store(cache, "2024-02-16T00:00:00+00:00", a="4" * 700, b="5" * 50)
    volume.write_text(f"{ROOT}/entries/ffff.json", "not json")
    orphan = b"o" * 90
    volume.write_bytes(f"{ROOT}/objects/{hashlib.sha256(orphan).hexdigest()}", orphan)
    a1, b2 = key_of(volume, "a", "1" * 700), key_of(volume, "b", "2" * 50)
    a3 = key_of(volume, "a", "3" * 700)
    before = snapshot(volume)
    policy = RetentionPolicy(max_age_days=7, max_bytes=800)
    cache.clock.set("2024-02-17T00:00:00+00:00")
    dry = prune(cache, policy, dry_run=True)
    assert snapshot(volume) == before
    real = prune(ArtifactCache(volume, ROOT, clock=cache.clock), policy)
    assert removed(dry) == removed(real)
    assert removed(real) == [
        ("ffff", None, "damaged"),
        *sorted([(a1, "a", "expired"), (b2, "b", "expired")]),
        (a3, "a", "over budget"),
    ]
    assert (dry.size_before, dry.size_after, dry.freed_bytes, dry.kept, dry.over_budget) == (
        real.size_before, real.size_after, real.freed_bytes, real.kept, real.over_budget)
    assert (real.size_before, real.size_after) == (2290, 750)
    assert real.summary() == (
        "pruned 4 entries (1 damaged, 2 expired, 1 over budget), freed 1.5 KiB, 2 entries kept"
    )
    assert dry.summary() == "dry run: " + real.summary()


def test_a_second_prune_at_the_same_time_removes_nothing():
    """Docs: "A second prune with the same policy at the same time removes
    nothing." and "Entries are evicted one at a time, least recently used
    first, until that size is at most `max_bytes`"."""
    from src.retention import RetentionPolicy, prune

    volume = MemoryFS()
    cache = ArtifactCache(volume, ROOT, clock=Clock("2024-01-01T00:00:00+00:00"))
    for day, text in enumerate("123456", start=1):
        store(cache, f"2024-02-0{day}T00:00:00+00:00", a=text * 100)
    cache.clock.set("2024-02-07T12:00:00+00:00")
    policy = RetentionPolicy(max_age_days=5, max_bytes=250)
    first = prune(cache, policy)
    assert [r.reason for r in first.removed] == [
        "expired", "expired", "over budget", "over budget"]
    assert first.kept == 2
    second = prune(cache, policy)
    assert second.removed == []
    assert (second.freed_bytes, second.kept, second.over_budget) == (0, 2, False)
