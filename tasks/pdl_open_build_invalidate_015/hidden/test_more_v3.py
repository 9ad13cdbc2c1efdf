import hashlib
import json
from datetime import datetime, timedelta, timezone, tzinfo

from src.builder import Builder
from src.cache import ArtifactCache
from src.faults import CrashFS, SimulatedCrash
from src.fs import MemoryFS
from src.targets import Project

ROOT = "cache"


class Clock:
    def __init__(self, when):
        self.now = when if isinstance(when, datetime) else datetime.fromisoformat(when)

    def __call__(self):
        return self.now

    def set(self, when):
        self.now = when if isinstance(when, datetime) else datetime.fromisoformat(when)


class TickingClock:
    """A clock that has moved on by ``step`` every time it is read again."""

    def __init__(self, when, step):
        self.start = datetime.fromisoformat(when)
        self.step = step
        self.reads = 0

    def __call__(self):
        moment = self.start + self.reads * self.step
        self.reads += 1
        return moment


class Berlin(tzinfo):
    """Central European time in 2024: UTC+1, and UTC+2 from 31 March 02:00
    (local) to 27 October 03:00 (local), like the runner in Berlin."""

    def utcoffset(self, dt):
        return timedelta(hours=1) + self.dst(dt)

    def dst(self, dt):
        wall = dt.replace(tzinfo=None)
        if datetime(2024, 3, 31, 2) <= wall < datetime(2024, 10, 27, 3):
            return timedelta(hours=1)
        return timedelta(0)

    def tzname(self, dt):
        return "CEST" if self.dst(dt) else "CET"


BERLIN = Berlin()


def berlin(*fields):
    return datetime(*fields, tzinfo=BERLIN)


def copy(ctx):
    for path in ctx.outputs:
        ctx.write_bytes(path, ctx.read_bytes(ctx.inputs[0]))


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


def digest(content):
    data = content if isinstance(content, bytes) else content.encode()
    return hashlib.sha256(data).hexdigest()


def entry_files(volume):
    prefix = f"{ROOT}/entries/"
    return {
        p[len(prefix):-5]: d
        for p, d in volume.snapshot().items()
        if p.startswith(prefix) and p.endswith(".json")
    }


def key_of(volume, target, *contents):
    wanted = [digest(c) for c in contents]
    for key, data in entry_files(volume).items():
        entry = json.loads(data)
        if entry["target"] == target and entry["outputs"] == wanted:
            return key
    raise AssertionError(f"no entry of {target} holding {contents!r}")


def removed(report):
    return [(r.key, r.target, r.reason) for r in report.removed]


def under_root(volume):
    return {p: d for p, d in volume.snapshot().items() if p.startswith(ROOT + "/")}


def tidy(volume):
    """Files under the root: exactly the entries and the blobs they refer to."""
    expected = {}
    for key, data in entry_files(volume).items():
        expected[f"{ROOT}/entries/{key}.json"] = data
        for d in json.loads(data)["outputs"]:
            expected[f"{ROOT}/objects/{d}"] = volume.read_bytes(f"{ROOT}/objects/{d}")
    return expected


def test_a_day_is_24_hours_even_across_a_daylight_saving_change():
    """Docs (docs/cache-retention.md): "an entry expires when its `last_used`
    lies more than that many days before now, a day being 24 hours." and
    "Machines in different time zones share caches, so entries record their
    times in UTC, written as `YYYY-MM-DDTHH:MM:SSZ` whatever offset the clock
    reports."; issue: "each runner's clock reports local time. An entry
    written in Tokyo and pruned from Austin has to age by the real time that
    passed."."""
    from src.retention import RetentionPolicy, prune

    policy = RetentionPolicy(max_age_days=1)

    # Spring: the clocks in Berlin go forward an hour on 31 March.
    volume = MemoryFS()
    cache = ArtifactCache(volume, ROOT, clock=Clock(berlin(2024, 3, 1, 0, 0)))
    store(cache, berlin(2024, 3, 30, 11, 0), b="bravo")
    store(cache, berlin(2024, 3, 30, 12, 0), a="alpha")
    ka, kb = key_of(volume, "a", "alpha"), key_of(volume, "b", "bravo")
    assert json.loads(entry_files(volume)[ka])["stored_at"] == "2024-03-30T11:00:00Z"
    cache.clock.set(berlin(2024, 3, 31, 12, 30))  # 23.5 and 24.5 real hours later
    report = prune(cache, policy)
    assert removed(report) == [(kb, "b", "expired")]
    assert ArtifactCache(volume, ROOT).keys() == [ka]

    # Autumn: the clocks in Berlin go back an hour on 27 October.
    volume = MemoryFS()
    cache = ArtifactCache(volume, ROOT, clock=Clock(berlin(2024, 10, 1, 0, 0)))
    store(cache, berlin(2024, 10, 26, 12, 0), c="charlie")
    store(cache, berlin(2024, 10, 26, 13, 0), d="delta")
    kc, kd = key_of(volume, "c", "charlie"), key_of(volume, "d", "delta")
    assert json.loads(entry_files(volume)[kc])["stored_at"] == "2024-10-26T10:00:00Z"
    cache.clock.set(berlin(2024, 10, 27, 11, 30))  # 24.5 and 23.5 real hours later
    report = prune(cache, policy)
    assert removed(report) == [(kc, "c", "expired")]
    assert ArtifactCache(volume, ROOT).keys() == [kd]


def test_now_is_taken_once_even_when_the_clock_moves_on_during_the_prune():
    """Docs (docs/cache-retention.md): ""Now" is the cache clock's time, taken
    once when the prune starts and truncated to whole seconds like the times
    entries record." and "An entry last used exactly `max_age_days` days ago
    is kept."."""
    from src.retention import RetentionPolicy, prune

    volume = MemoryFS()
    cache = ArtifactCache(volume, ROOT, clock=Clock("2024-01-01T00:00:00+00:00"))
    store(cache, "2024-04-01T09:59:59+00:00", old="o" * 10)
    store(cache, "2024-04-01T10:00:00+00:00", a="a" * 10, b="b" * 10, c="c" * 10,
          d="d" * 10)
    keys = {name: key_of(volume, name, name[0] * 10) for name in ("old", "a", "b", "c", "d")}
    # A prune of a large volume takes hours: every later reading of the clock
    # is an hour further on.
    clock = TickingClock("2024-04-08T10:00:00+00:00", timedelta(hours=1))
    report = prune(ArtifactCache(volume, ROOT, clock=clock),
                   RetentionPolicy(max_age_days=7))
    assert clock.reads >= 1
    assert removed(report) == [(keys["old"], "old", "expired")]
    assert report.kept == 4
    assert ArtifactCache(volume, ROOT).keys() == sorted(
        keys[name] for name in ("a", "b", "c", "d"))


def test_a_prune_from_a_checkout_leaves_its_workspace_and_state_alone():
    """Docs (docs/cache-retention.md): "It can run from any checkout and never
    touches a workspace or a state store: a target whose entry was pruned
    simply runs again, or is restored from another entry, the next time it is
    out of date."; README: "A cache lives in any `FileSystem`" and the example
    `ArtifactCache(fs, ".build/cache")` next to `state_path=".build/state.json"`."""
    from src.retention import RetentionPolicy, prune

    p = project("a", "b")
    clock = Clock("2024-05-01T08:00:00+02:00")
    fs = MemoryFS({"src/a.txt": "one", "src/b.txt": "bee", "notes/todo.txt": "x"})
    cache = ArtifactCache(fs, ".build/cache", clock=clock)
    Builder(p, fs, state_path=".build/state.json", cache=cache).build()
    clock.set("2024-05-02T08:00:00+02:00")
    fs.write_text("src/a.txt", "two")
    assert Builder(p, fs, state_path=".build/state.json", cache=cache).build().ran == ["a"]
    outside = {path: data for path, data in fs.snapshot().items()
               if not path.startswith(".build/cache/")}
    assert ".build/state.json" in outside and "out/a.bin" in outside

    clock.set("2024-05-20T08:00:00+02:00")
    report = prune(cache, RetentionPolicy(max_age_days=7))
    assert sorted(r.target for r in report.removed) == ["a", "a", "b"]
    assert [r.reason for r in report.removed] == ["expired"] * 3
    assert cache.keys() == []
    assert {path: data for path, data in fs.snapshot().items()
            if not path.startswith(".build/cache/")} == outside

    result = Builder(p, fs, state_path=".build/state.json", cache=cache).build()
    assert result.skipped == ["a", "b"] and result.up_to_date
    fs.delete("out/a.bin")
    result = Builder(p, fs, state_path=".build/state.json", cache=cache).build()
    assert result.ran == ["a"] and result.restored == []
    assert fs.read_text("out/a.bin") == "two"


def test_a_dry_run_also_leaves_what_a_cut_store_left_behind():
    """Docs (docs/cache-retention.md): "With `dry_run=True` a prune changes
    nothing at all (no entry file or blob is deleted or rewritten, damaged
    ones included) and returns the report the same prune would have produced
    without it" and "Anything else a cut operation leaves behind is never
    taken for an entry, and the next prune that is not a dry run deletes
    it."."""
    from src.retention import RetentionPolicy, prune

    seed = MemoryFS()
    cache = ArtifactCache(seed, ROOT, clock=Clock("2024-01-01T00:00:00+00:00"))
    store(cache, "2024-03-01T09:00:00+00:00", gamma="g" * 300)
    stale = key_of(seed, "gamma", "g" * 300)
    files = seed.snapshot()

    def run(volume):
        cache = ArtifactCache(volume, ROOT, clock=Clock("2024-03-10T09:00:00+00:00"))
        workspace = MemoryFS({"src/alpha.txt": "a" * 100, "src/beta.txt": "b" * 50})
        Builder(project("alpha", "beta"), workspace, cache=cache).build()

    probe = CrashFS(files)
    run(probe)
    assert probe.steps > 0
    policy = RetentionPolicy(max_age_days=7)
    for step in range(1, probe.steps + 1):
        cut = CrashFS(files, crash_at=step)
        try:
            run(cut)
        except SimulatedCrash:
            pass
        assert cut.crashed, step
        volume = cut.survivor()
        before = volume.snapshot()
        entries = len(entry_files(volume))
        dry = prune(ArtifactCache(volume, ROOT, clock=Clock("2024-03-11T00:00:00+00:00")),
                    policy, dry_run=True)
        assert volume.snapshot() == before, step
        assert removed(dry) == [(stale, "gamma", "expired")], step
        real = prune(ArtifactCache(volume, ROOT, clock=Clock("2024-03-11T00:00:00+00:00")),
                     policy)
        assert removed(real) == removed(dry), step
        assert (dry.size_before, dry.size_after, dry.kept) == (
            real.size_before, real.size_after, real.kept), step
        assert real.kept == entries - 1, step
        assert dry.summary() == "dry run: " + real.summary(), step
        assert under_root(volume) == tidy(volume), step


def sign(ctx):
    text = ctx.read_text(ctx.inputs[0])
    ctx.write_text(ctx.outputs[0], text)
    ctx.write_text(ctx.outputs[1], "sig:" + text)


def two_outputs(name):
    """``doc`` writes the same bytes to both outputs, ``fw`` signs its image."""
    p = Project()
    p.add(name, copy if name == "doc" else sign, inputs=[f"src/{name}.txt"],
          outputs=[f"out/{name}.bin", f"out/{name}.sig"])
    return p


def test_every_blob_of_a_several_output_entry_is_checked_and_counted_once():
    """Docs (docs/cache-retention.md): "An entry is damaged when its file
    cannot be decoded, or when one of its blobs is missing or does not match
    its digest." and "the size checked against the budget is the total size
    of the blobs that the remaining entries refer to, each blob counted once
    however many entries share it." and "Entries of the targets named in
    `keep` are never expired or evicted.  They still count towards the
    budget, and a damaged one is still removed."."""
    from src.retention import RetentionPolicy, prune

    volume = MemoryFS()
    clock = Clock("2024-06-01T00:00:00+00:00")
    cache = ArtifactCache(volume, ROOT, clock=clock)

    def build(when, name, text):
        clock.set(when)
        fs = MemoryFS({f"src/{name}.txt": text})
        result = Builder(two_outputs(name), fs, cache=cache).build()
        assert result.ran == [name]

    build("2024-06-01T00:00:00+00:00", "doc", "1" * 300)
    build("2024-06-02T00:00:00+00:00", "doc", "2" * 300)
    build("2024-06-03T00:00:00+00:00", "fw", "f" * 40)
    doc1 = key_of(volume, "doc", "1" * 300, "1" * 300)
    doc2 = key_of(volume, "doc", "2" * 300, "2" * 300)
    fw1 = key_of(volume, "fw", "f" * 40, "sig:" + "f" * 40)

    # A truncated blob that both outputs of the newest doc entry share.
    volume.write_bytes(f"{ROOT}/objects/{digest('2' * 300)}", b"2" * 150)
    clock.set("2024-06-04T00:00:00+00:00")
    report = prune(cache, RetentionPolicy(max_bytes=384), dry_run=True)
    assert removed(report) == [(doc2, "doc", "damaged")]
    assert (report.size_before, report.size_after, report.kept) == (534, 384, 2)
    assert report.over_budget is False

    # The second blob of a kept target's entry goes missing.
    volume.write_bytes(f"{ROOT}/objects/{digest('2' * 300)}", b"2" * 300)
    build("2024-06-05T00:00:00+00:00", "fw", "g" * 40)
    fw2 = key_of(volume, "fw", "g" * 40, "sig:" + "g" * 40)
    volume.delete(f"{ROOT}/objects/{digest('sig:' + 'g' * 40)}")
    clock.set("2024-06-06T00:00:00+00:00")
    report = prune(cache, RetentionPolicy(max_bytes=684, keep=["fw"]))
    assert removed(report) == [(fw2, "fw", "damaged")]
    assert (report.size_before, report.size_after, report.kept) == (724, 684, 3)
    assert report.over_budget is False
    report = prune(cache, RetentionPolicy(max_bytes=683, keep=["fw"]))
    assert removed(report) == [(doc1, "doc", "over budget")]
    assert (report.size_after, report.over_budget) == (384, False)
    assert ArtifactCache(volume, ROOT).keys() == sorted([doc2, fw1])


def test_an_entry_without_times_can_be_restored_and_then_ages_from_that_restore():
    """Docs (docs/cache-retention.md): "Entries written by releases that did not
    record times are still valid." and "Every restore that writes a target's
    outputs sets the entry's `last_used` to the current time and saves it in
    the entry file; `stored_at` does not change." and "an entry expires when
    its `last_used` lies more than that many days before now"."""
    from src.retention import RetentionPolicy, prune

    volume = MemoryFS()
    cache = ArtifactCache(volume, ROOT, clock=Clock("2024-01-01T00:00:00+00:00"))
    store(cache, "2024-02-01T00:00:00+00:00", a="firmware")
    key = key_of(volume, "a", "firmware")
    path = f"{ROOT}/entries/{key}.json"
    data = json.loads(volume.read_text(path))
    del data["stored_at"], data["last_used"]
    volume.write_text(path, json.dumps(data))

    fs = MemoryFS({"src/a.txt": "firmware"})
    cache.clock.set("2024-04-10T06:00:00+09:00")
    result = Builder(project("a"), fs, cache=cache).build()
    assert result.restored == ["a"] and result.ran == []
    assert fs.read_text("out/a.bin") == "firmware"
    after = json.loads(volume.read_text(path))
    assert after["last_used"] == "2024-04-09T21:00:00Z"
    assert after.get("stored_at") in (None, "1970-01-01T00:00:00Z")
    assert (after["target"], after["outputs"]) == (data["target"], data["outputs"])

    policy = RetentionPolicy(max_age_days=14)
    cache.clock.set("2024-04-23T21:00:00+00:00")
    assert prune(cache, policy).removed == []
    cache.clock.set("2024-04-23T21:00:01+00:00")
    assert removed(prune(cache, policy)) == [(key, "a", "expired")]
