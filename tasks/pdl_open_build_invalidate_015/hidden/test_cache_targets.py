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


def concat(ctx):
    ctx.write_text(ctx.outputs[0], "".join(ctx.read_text(p) for p in ctx.inputs))


def to_html(ctx):
    body = "".join(f"<p>{ctx.read_text(p)}</p>" for p in ctx.inputs)
    ctx.write_text(ctx.outputs[0], f"<html>{body}</html>")


def to_text(ctx):
    ctx.write_text(ctx.outputs[0], "\n".join(ctx.read_text(p) for p in ctx.inputs))


def manual():
    p = Project()
    p.add("manual-html", to_html, inputs=["manual/*.md"], outputs=["dist/manual.html"])
    p.add("manual-text", to_text, inputs=["manual/*.md"], outputs=["dist/manual.txt"])
    return p


CHAPTERS = {"manual/1.md": "intro", "manual/2.md": "usage"}


def test_targets_reading_the_same_files_keep_their_own_entries():
    """README: "Entries are keyed by the target's name, its declared outputs and
    its fingerprint, so two targets never share an entry."; docs: "An entry
    belongs to the target recorded in it." and "Entries of the targets named
    in `keep` are never expired or evicted."."""
    from src.retention import RetentionPolicy, prune

    volume = MemoryFS()
    cache = ArtifactCache(volume, ROOT, clock=Clock("2024-02-01T00:00:00+00:00"))
    fs = MemoryFS(CHAPTERS)
    result = Builder(manual(), fs, cache=cache).build()
    assert result.ran == ["manual-html", "manual-text"]
    assert fs.read_text("dist/manual.txt") == "intro\nusage"
    assert len(cache.keys()) == 2
    cache.clock.set("2024-03-01T00:00:00+00:00")
    report = prune(cache, RetentionPolicy(max_age_days=7, keep=["manual-text"]))
    assert [(r.target, r.reason) for r in report.removed] == [("manual-html", "expired")]
    assert [e.target for e in cache.entries_of("manual-text")] == ["manual-text"]
    fresh = MemoryFS(CHAPTERS)
    result = Builder(manual(), fresh, cache=cache).build()
    assert result.ran == ["manual-html"]
    assert result.restored == ["manual-text"]
    assert fresh.read_text("dist/manual.txt") == "intro\nusage"
    assert fresh.read_text("dist/manual.html") == "<html><p>intro</p><p>usage</p></html>"


def copy(ctx):
    ctx.write_bytes(ctx.outputs[0], ctx.read_bytes(ctx.inputs[0]))


def test_a_pruned_entry_means_the_target_runs_again():
    """Docs: "a target whose entry was pruned simply runs again, or is restored
    from another entry, the next time it is out of date." and "Every restore
    that writes a target's outputs sets the entry's `last_used`"."""
    from src.retention import RetentionPolicy, prune

    p = Project()
    p.add("a", copy, inputs=["src/a.txt"], outputs=["out/a.bin"])
    volume = MemoryFS()
    clock = Clock("2024-02-01T00:00:00+00:00")
    cache = ArtifactCache(volume, ROOT, clock=clock)
    Builder(p, MemoryFS({"src/a.txt": "old"}), cache=cache).build()
    clock.set("2024-02-02T00:00:00+00:00")
    Builder(p, MemoryFS({"src/a.txt": "new"}), cache=cache).build()
    clock.set("2024-02-03T00:00:00+00:00")
    assert Builder(p, MemoryFS({"src/a.txt": "old"}), cache=cache).build().restored == ["a"]
    clock.set("2024-02-04T00:00:00+00:00")
    report = prune(cache, RetentionPolicy(max_bytes=3))
    assert [(r.target, r.reason) for r in report.removed] == [("a", "over budget")]
    fs = MemoryFS({"src/a.txt": "new"})
    result = Builder(p, fs, cache=cache).build()
    assert result.ran == ["a"]
    assert fs.read_text("out/a.bin") == "new"
    fs = MemoryFS({"src/a.txt": "old"})
    assert Builder(p, fs, cache=cache).build().restored == ["a"]
