import hashlib
import json
from datetime import datetime

from src.builder import Builder
from src.cache import ArtifactCache
from src.faults import CrashFS, SimulatedCrash
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


def checkout(**contents):
    return MemoryFS({f"src/{name}.txt": text for name, text in contents.items()})


def build(volume, when, **contents):
    """A fresh checkout builds the named targets against the cache on ``volume``."""
    cache = ArtifactCache(volume, ROOT, clock=Clock(when))
    workspace = checkout(**contents)
    result = Builder(project(*contents), workspace, cache=cache).build()
    return result, workspace


def digest(text):
    return hashlib.sha256(text.encode()).hexdigest()


def under_root(volume):
    return {p: d for p, d in volume.snapshot().items() if p.startswith(ROOT + "/")}


def entry_files(volume):
    prefix = f"{ROOT}/entries/"
    return {
        p[len(prefix):-5]: d
        for p, d in volume.snapshot().items()
        if p.startswith(prefix) and p.endswith(".json")
    }


def key_of(volume, target, content):
    for key, data in entry_files(volume).items():
        entry = json.loads(data)
        if entry["target"] == target and entry["outputs"] == [digest(content)]:
            return key
    raise AssertionError(f"no entry of {target} holding {content!r}")


def tidy(volume):
    """Files under the root: exactly the entries and the blobs they refer to."""
    expected = {}
    for key, data in entry_files(volume).items():
        expected[f"{ROOT}/entries/{key}.json"] = data
        for d in json.loads(data)["outputs"]:
            expected[f"{ROOT}/objects/{d}"] = volume.read_bytes(f"{ROOT}/objects/{d}")
    return expected


def each_cut(files, run):
    """Run ``run`` on a CrashFS holding ``files``, cut at each step in turn.

    Yields ``(step, survivor)``; the uncut run must make at least one step.
    """
    probe = CrashFS(files)
    run(probe)
    assert probe.steps > 0
    for step in range(1, probe.steps + 1):
        volume = CrashFS(files, crash_at=step)
        try:
            run(volume)
        except SimulatedCrash:
            pass
        assert volume.crashed, f"step {step} was never reached"
        yield step, volume.survivor()


def restored_from(volume, when, **contents):
    """A fresh checkout (on a copy of the volume) restores the named targets."""
    result, workspace = build(MemoryFS(volume.snapshot()), when, **contents)
    assert result.ran == [], result.ran
    for name, text in contents.items():
        assert workspace.read_text(f"out/{name}.bin") == text


def prune_at(volume, when, policy, **kwargs):
    from src.retention import prune

    return prune(ArtifactCache(volume, ROOT, clock=Clock(when)), policy, **kwargs)


def test_a_cut_first_build_leaves_each_entry_absent_or_complete():
    """Docs: "A store that was cut leaves under its key either what was there
    before it started (an entry, or no entry) or the complete new entry, which
    can then be restored." and "Anything else a cut operation leaves behind is
    never taken for an entry"."""
    sources = {"alpha": "first output", "beta": "second output"}
    complete = MemoryFS()
    build(complete, "2024-03-01T10:00:00+00:00", **sources)
    new_entries = entry_files(complete)
    assert len(new_entries) == 2

    def run(volume):
        build(volume, "2024-03-01T10:00:00+00:00", **sources)

    for step, survivor in each_cut({}, run):
        found = entry_files(survivor)
        assert set(ArtifactCache(survivor, ROOT).keys()) == set(found), step
        for key, data in found.items():
            assert data == new_entries[key], step
            target = json.loads(data)["target"]
            restored_from(survivor, "2024-03-02T00:00:00+00:00", **{target: sources[target]})


def test_the_next_prune_deletes_what_a_cut_build_left_behind():
    """Docs: "Anything else a cut operation leaves behind is never taken for an
    entry, and the next prune that is not a dry run deletes it." and "A store
    that was cut leaves under its key either what was there before it started
    (an entry, or no entry) or the complete new entry"."""
    from src.retention import RetentionPolicy

    seed = MemoryFS()
    build(seed, "2024-03-01T09:00:00+00:00", gamma="kept from before")
    files = seed.snapshot()

    def run(volume):
        build(volume, "2024-03-01T10:00:00+00:00", alpha="first output", beta="second output")

    for step, survivor in each_cut(files, run):
        entries = len(entry_files(survivor))
        report = prune_at(survivor, "2024-03-01T11:00:00+00:00", RetentionPolicy())
        assert report.removed == [], step
        assert report.kept == entries, step
        assert under_root(survivor) == tidy(survivor), step
        restored_from(survivor, "2024-03-02T00:00:00+00:00", gamma="kept from before")


HEADER_PROJECT_OUTPUT = "out/app.o"


def compile_with_header(ctx):
    header = ctx.read_text("inc/config.h") if ctx.exists("inc/config.h") else ""
    ctx.write_text(HEADER_PROJECT_OUTPUT, ctx.read_text("src/app.c") + "|" + header)


def header_project():
    p = Project()
    p.add("app", compile_with_header, inputs=["src/app.c"], scan=["inc/*.h"],
          outputs=[HEADER_PROJECT_OUTPUT])
    return p


def header_build(volume, when, header):
    cache = ArtifactCache(volume, ROOT, clock=Clock(when))
    workspace = MemoryFS({"src/app.c": "main", "inc/config.h": header})
    result = Builder(header_project(), workspace, cache=cache).build()
    return result, workspace


def test_a_cut_store_under_an_existing_key_keeps_the_old_or_the_new_entry():
    """Docs: "A store that was cut leaves under its key either what was there
    before it started (an entry, or no entry) or the complete new entry, which
    can then be restored." and README: "Storing an entry replaces any entry
    stored under the same key."."""
    seed = MemoryFS()
    header_build(seed, "2024-03-01T09:00:00+00:00", "one")
    (key,) = entry_files(seed)
    old = entry_files(seed)[key]
    after = MemoryFS(seed.snapshot())
    result, _ = header_build(after, "2024-03-01T10:00:00+00:00", "two")
    assert result.ran == ["app"]
    new = entry_files(after)[key]
    assert old != new

    def run(volume):
        header_build(volume, "2024-03-01T10:00:00+00:00", "two")

    for step, survivor in each_cut(seed.snapshot(), run):
        found = entry_files(survivor)
        assert set(found) == {key}, step
        assert found[key] in (old, new), step
        header = "one" if found[key] == old else "two"
        result, workspace = header_build(
            MemoryFS(survivor.snapshot()), "2024-03-02T00:00:00+00:00", header
        )
        assert result.restored == ["app"], step
        assert workspace.read_text(HEADER_PROJECT_OUTPUT) == "main|" + header


def test_a_cut_restore_leaves_the_entry_usable_with_old_or_new_last_used():
    """Docs: "A restore that was cut leaves its entry in place and usable, with
    its `last_used` either as it was or as that restore sets it." and "Every
    restore that writes a target's outputs sets the entry's `last_used` to the
    current time and saves it in the entry file; `stored_at` does not
    change."."""
    seed = MemoryFS()
    build(seed, "2024-03-01T09:00:00+00:00", alpha="first output")
    (key,) = entry_files(seed)
    before = json.loads(entry_files(seed)[key])

    def run(volume):
        result, _ = build(volume, "2024-03-05T12:30:00+00:00", alpha="first output")
        assert result.restored == ["alpha"]

    uncut = MemoryFS(seed.snapshot())
    run(uncut)
    assert json.loads(entry_files(uncut)[key])["last_used"] == "2024-03-05T12:30:00Z"

    for step, survivor in each_cut(seed.snapshot(), run):
        found = entry_files(survivor)
        assert set(found) == {key}, step
        entry = json.loads(found[key])
        assert entry["last_used"] in ("2024-03-01T09:00:00Z", "2024-03-05T12:30:00Z"), step
        for field in ("target", "outputs", "discovered", "stored_at"):
            assert entry.get(field) == before.get(field), (step, field)
        restored_from(survivor, "2024-03-06T00:00:00+00:00", alpha="first output")


def test_an_entry_stored_over_a_truncated_blob_can_be_restored():
    """Docs: "A store that returned is acknowledged: from then on its entry can
    be found and restored, with exactly the outputs that were stored" and
    Issue: "Every few weeks a network hiccup leaves a truncated blob or a
    half-written entry file on the volume."."""
    volume = MemoryFS()
    build(volume, "2024-03-01T09:00:00+00:00", alpha="firmware image v7")
    blob = f"{ROOT}/objects/{digest('firmware image v7')}"
    volume.write_bytes(blob, volume.read_bytes(blob)[:5])
    result, _ = build(volume, "2024-03-02T09:00:00+00:00", alpha="firmware image v7")
    assert result.ran == ["alpha"]
    for day in ("03", "04"):
        result, workspace = build(volume, f"2024-03-{day}T09:00:00+00:00",
                                  alpha="firmware image v7")
        assert result.restored == ["alpha"]
        assert workspace.read_text("out/alpha.bin") == "firmware image v7"


def test_a_cut_build_never_damages_an_acknowledged_entry_sharing_its_blob():
    """Docs: "A store that returned is acknowledged: from then on its entry can
    be found and restored, with exactly the outputs that were stored, until a
    prune removes it or a later store under the same key replaces it." and
    Issue: "Every few weeks a network hiccup leaves a truncated blob or a
    half-written entry file on the volume."."""
    seed = MemoryFS({f"{ROOT}/objects/{digest('same bytes')}": "same"})
    build(seed, "2024-03-01T09:00:00+00:00", alpha="same bytes", gamma="other bytes")

    def run(volume):
        build(volume, "2024-03-02T09:00:00+00:00", beta="same bytes", delta="other bytes")

    for step, survivor in each_cut(seed.snapshot(), run):
        restored_from(survivor, "2024-03-03T00:00:00+00:00",
                      alpha="same bytes", gamma="other bytes")


# A prune scenario: one damaged entry, one expired entry, two evictions, one
# file left behind by a cut store.
NOW = "2024-03-30T00:00:00+00:00"


def prune_scenario():
    from src.retention import RetentionPolicy

    volume = MemoryFS()
    build(volume, "2024-03-18T00:00:00+00:00", broken="lost its blob")
    build(volume, "2024-03-05T00:00:00+00:00", stale="not used for weeks")
    build(volume, "2024-03-20T00:00:00+00:00", pkg="s" * 10)
    build(volume, "2024-03-21T00:00:00+00:00", pkg="l" * 100)
    build(volume, "2024-03-22T00:00:00+00:00", pkg="t" * 5)
    build(volume, "2024-03-23T00:00:00+00:00", docs="d" * 20)
    volume.delete(f"{ROOT}/objects/{digest('lost its blob')}")
    cut = CrashFS(volume.snapshot(), crash_at=1)
    try:
        build(cut, "2024-03-24T00:00:00+00:00", late="never finished")
    except SimulatedCrash:
        pass
    assert cut.crashed
    volume = cut.survivor()
    keys = {
        "broken": key_of(volume, "broken", "lost its blob"),
        "stale": key_of(volume, "stale", "not used for weeks"),
        "small": key_of(volume, "pkg", "s" * 10),
        "large": key_of(volume, "pkg", "l" * 100),
        "newest": key_of(volume, "pkg", "t" * 5),
        "docs": key_of(volume, "docs", "d" * 20),
    }
    policy = RetentionPolicy(max_age_days=14, max_bytes=40)
    expected = [
        (keys["broken"], "broken", "damaged"),
        (keys["stale"], "stale", "expired"),
        (keys["small"], "pkg", "over budget"),
        (keys["large"], "pkg", "over budget"),
    ]
    return volume.snapshot(), policy, expected


def uncut_prune(files, policy, expected):
    volume = MemoryFS(files)
    report = prune_at(volume, NOW, policy)
    assert [(r.key, r.target, r.reason) for r in report.removed] == expected
    final = under_root(volume)
    assert final == tidy(volume)
    return final


def test_a_cut_prune_run_again_ends_exactly_where_an_uncut_prune_ends():
    """Docs: "A prune that was cut has removed only entries that the same prune
    would have removed, and has deleted no blob that an entry still in the
    cache refers to.  Running the same prune again (same policy, same time)
    then leaves the cache exactly as the first one would have left it had it
    not been cut: the same entry files with the same contents, the same blobs,
    and nothing else under the cache root." and "Entries are evicted one at a
    time, least recently used first, until that size is at most
    `max_bytes`"."""
    files, policy, expected = prune_scenario()
    final = uncut_prune(files, policy, expected)
    before = entry_files(MemoryFS(files))
    removable = {key for key, _, _ in expected}

    def run(volume):
        prune_at(volume, NOW, policy)

    for step, survivor in each_cut(files, run):
        remaining = entry_files(survivor)
        assert set(before) - set(remaining) <= removable, step
        for key, data in remaining.items():
            assert data == before[key], step
            for d in json.loads(data)["outputs"]:
                path = f"{ROOT}/objects/{d}"
                if path in files:
                    assert survivor.exists(path), (step, key)
        prune_at(survivor, NOW, policy)
        assert under_root(survivor) == final, step


def test_a_prune_cut_while_finishing_a_cut_prune_still_converges():
    """Docs: "Whatever file operation they are cut at, and however many
    operations are cut one after another, the cache keeps these promises" and
    "Running the same prune again (same policy, same time) then leaves the
    cache exactly as the first one would have left it had it not been
    cut" and "The most recent entry of each target is never evicted"."""
    files, policy, expected = prune_scenario()
    final = uncut_prune(files, policy, expected)

    def run(volume):
        prune_at(volume, NOW, policy)

    runs = 0
    for first, survivor in each_cut(files, run):
        for second, again in each_cut(survivor.snapshot(), run):
            prune_at(again, NOW, policy)
            assert under_root(again) == final, (first, second)
            runs += 1
    assert runs > 0
