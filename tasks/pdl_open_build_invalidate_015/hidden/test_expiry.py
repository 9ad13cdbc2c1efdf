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


def test_entry_used_exactly_max_age_days_ago_is_kept():
    """Docs: "an entry expires when its `last_used` lies more than that many
    days before now, a day being 24 hours.  An entry last used exactly
    `max_age_days` days ago is kept." and "Times are compared as instants."."""
    from src.retention import RetentionPolicy, prune

    volume = MemoryFS()
    cache = ArtifactCache(volume, ROOT, clock=Clock("2024-01-01T00:00:00+00:00"))
    store(cache, "2024-03-01T09:00:00+09:00", a="alpha")
    store(cache, "2024-03-01T01:00:01+01:00", b="beta")
    ka, kb = key_of(volume, "a", "alpha"), key_of(volume, "b", "beta")
    policy = RetentionPolicy(max_age_days=14)
    cache.clock.set("2024-03-14T19:00:00-05:00")
    report = prune(cache, policy)
    assert report.removed == []
    assert report.kept == 2
    cache.clock.set("2024-03-14T19:00:01-05:00")
    report = prune(cache, policy)
    assert removed(report) == [(ka, "a", "expired")]
    assert ArtifactCache(volume, ROOT).keys() == [kb]


def test_now_is_truncated_to_whole_seconds_before_ages_are_taken():
    """Docs: ""Now" is the cache clock's time, taken once when the prune starts
    and truncated to whole seconds like the times entries record." and "An
    entry last used exactly `max_age_days` days ago is kept."."""
    from src.retention import RetentionPolicy, prune

    volume = MemoryFS()
    cache = ArtifactCache(volume, ROOT, clock=Clock("2024-01-01T00:00:00+00:00"))
    store(cache, "2024-04-01T10:00:00.700000+00:00", a="alpha")
    policy = RetentionPolicy(max_age_days=7)
    cache.clock.set("2024-04-08T10:00:00.400000+00:00")
    assert prune(cache, policy).removed == []
    cache.clock.set("2024-04-08T10:00:00.999999+00:00")
    assert prune(cache, policy).removed == []
    cache.clock.set("2024-04-08T10:00:01+00:00")
    report = prune(cache, policy)
    assert [(r.target, r.reason) for r in report.removed] == [("a", "expired")]


def test_restores_keep_an_entry_alive():
    """Docs: "Every restore that writes a target's outputs sets the entry's
    `last_used` to the current time and saves it in the entry file" and "an
    entry expires when its `last_used` lies more than that many days before
    now"."""
    from src.retention import RetentionPolicy, prune

    volume = MemoryFS()
    cache = ArtifactCache(volume, ROOT, clock=Clock("2024-01-01T00:00:00+00:00"))
    store(cache, "2024-05-01T08:00:00+09:00", a="alpha")
    result = store(cache, "2024-05-10T18:00:00-05:00", a="alpha")
    assert result.restored == ["a"]
    policy = RetentionPolicy(max_age_days=14)
    cache.clock.set("2024-05-25T00:00:00+01:00")
    assert prune(cache, policy).removed == []
    cache.clock.set("2024-05-25T00:00:01+01:00")
    report = prune(cache, policy)
    assert [(r.target, r.reason) for r in report.removed] == [("a", "expired")]
    assert report.kept == 0


def write_legacy(volume, key, target, content, **times):
    data = content.encode()
    digest = hashlib.sha256(data).hexdigest()
    volume.write_bytes(f"{ROOT}/objects/{digest}", data)
    entry = {"target": target, "outputs": [digest], **times}
    volume.write_text(f"{ROOT}/entries/{key}.json", json.dumps(entry))


def test_entries_without_times_age_from_stored_at_or_the_epoch():
    """Docs: "An entry without `last_used` counts as last used at its
    `stored_at`; an entry with neither counts as stored and last used at
    1970-01-01T00:00:00Z." and "Entries are evicted one at a time, least
    recently used first"."""
    from src.retention import RetentionPolicy, prune

    volume = MemoryFS()
    cache = ArtifactCache(volume, ROOT, clock=Clock("2024-01-01T00:00:00+00:00"))
    write_legacy(volume, "0old", "a", "x" * 100)
    write_legacy(volume, "1mid", "a", "y" * 100, stored_at="2024-01-11T00:00:00Z")
    write_legacy(volume, "2new", "a", "z" * 100, stored_at="2024-01-05T00:00:00Z",
                 last_used="2024-01-19T00:00:00Z")
    cache.clock.set("2024-01-20T12:00:00+00:00")
    report = prune(cache, RetentionPolicy(max_age_days=10), dry_run=True)
    assert removed(report) == [("0old", "a", "expired")]
    report = prune(cache, RetentionPolicy(max_bytes=150), dry_run=True)
    assert removed(report) == [("0old", "a", "over budget"), ("1mid", "a", "over budget")]
    write_legacy(volume, "3top", "b", "w" * 10)
    report = prune(cache, RetentionPolicy(max_age_days=9))
    assert removed(report) == [
        ("0old", "a", "expired"), ("1mid", "a", "expired"), ("3top", "b", "expired")]
    assert report.kept == 1


def test_keep_protects_from_expiry_but_not_from_damage():
    """Docs: "Entries of the targets named in `keep` are never expired or
    evicted.  They still count towards the budget, and a damaged one is still
    removed." and "An entry is damaged when its file cannot be decoded, or when
    one of its blobs is missing or does not match its digest."."""
    from src.retention import RetentionPolicy, prune

    volume = MemoryFS()
    cache = ArtifactCache(volume, ROOT, clock=Clock("2024-01-01T00:00:00+00:00"))
    store(cache, "2024-02-01T00:00:00+00:00", a="first", b="beta")
    store(cache, "2024-02-02T00:00:00+00:00", a="second")
    stale = key_of(volume, "a", "first")
    fresh = key_of(volume, "a", "second")
    kb = key_of(volume, "b", "beta")
    digest = hashlib.sha256(b"first").hexdigest()
    volume.write_text(f"{ROOT}/objects/{digest}", "tampered")
    cache.clock.set("2024-04-01T00:00:00+00:00")
    report = prune(cache, RetentionPolicy(max_age_days=30, keep=["a"]))
    assert removed(report) == [(stale, "a", "damaged"), (kb, "b", "expired")]
    assert report.kept == 1
    assert ArtifactCache(volume, ROOT).keys() == [fresh]
    assert not volume.exists(f"{ROOT}/objects/{digest}")
