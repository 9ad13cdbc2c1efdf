import json
from datetime import datetime, timedelta

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


def entries(volume):
    prefix = f"{ROOT}/entries/"
    return {
        path[len(prefix):-5]: json.loads(volume.read_text(path))
        for path in volume.list_files()
        if path.startswith(prefix)
    }


def only_entry(volume):
    (data,) = entries(volume).values()
    return data


def test_times_are_recorded_in_utc_whole_seconds():
    """Docs: "entries record their times in UTC, written as `YYYY-MM-DDTHH:MM:SSZ`
    whatever offset the clock reports.  Fractions of a second are dropped, not
    rounded." and "Storing sets both `stored_at` and `last_used` to the current
    time"."""
    volume = MemoryFS()
    clock = Clock("2024-03-01T10:15:30.900000+02:00")
    cache = ArtifactCache(volume, ROOT, clock=clock)
    Builder(project("a"), MemoryFS({"src/a.txt": "alpha"}), cache=cache).build()
    data = only_entry(volume)
    assert data["stored_at"] == "2024-03-01T08:15:30Z"
    assert data["last_used"] == "2024-03-01T08:15:30Z"


def test_restore_updates_last_used_but_not_stored_at():
    """Docs: "Every restore that writes a target's outputs sets the entry's
    `last_used` to the current time and saves it in the entry file;
    `stored_at` does not change." and "entries record their times in UTC"."""
    volume = MemoryFS()
    clock = Clock("2024-03-01T08:00:00+00:00")
    cache = ArtifactCache(volume, ROOT, clock=clock)
    Builder(project("a"), MemoryFS({"src/a.txt": "alpha"}), cache=cache).build()
    clock.set("2024-03-04T21:30:05.500000-05:00")
    other = ArtifactCache(volume, ROOT, clock=clock)
    fs = MemoryFS({"src/a.txt": "alpha"})
    result = Builder(project("a"), fs, cache=other).build()
    assert result.restored == ["a"]
    assert fs.read_text("out/a.bin") == "alpha"
    data = only_entry(volume)
    assert data["stored_at"] == "2024-03-01T08:00:00Z"
    assert data["last_used"] == "2024-03-05T02:30:05Z"


def compile_(ctx):
    header = ctx.read_text("include/board.h") if ctx.exists("include/board.h") else ""
    ctx.write_text("obj/main.o", ctx.read_text("src/main.c") + "|" + header)


def test_storing_under_an_existing_key_replaces_the_times():
    """Docs: "storing under the key of an existing entry replaces that entry,
    times included." and "Every restore that writes a target's outputs sets the
    entry's `last_used` to the current time"; README: "An entry is only used
    when every input its action discovered when the entry was stored still has
    the content it had then"."""
    p = Project()
    p.add("compile", compile_, inputs=["src/main.c"], scan=["include/**"],
          outputs=["obj/main.o"])
    volume = MemoryFS()
    clock = Clock("2024-06-01T09:00:00+00:00")
    cache = ArtifactCache(volume, ROOT, clock=clock)
    Builder(p, MemoryFS({"src/main.c": "m", "include/board.h": "4"}), cache=cache).build()
    clock.set("2024-06-02T09:00:00+00:00")
    result = Builder(p, MemoryFS({"src/main.c": "m", "include/board.h": "4"}),
                     cache=cache).build()
    assert result.restored == ["compile"]
    data = only_entry(volume)
    assert (data["stored_at"], data["last_used"]) == (
        "2024-06-01T09:00:00Z", "2024-06-02T09:00:00Z")
    clock.set("2024-06-03T09:00:00+00:00")
    fs = MemoryFS({"src/main.c": "m", "include/board.h": "8"})
    result = Builder(p, fs, cache=cache).build()
    assert result.ran == ["compile"]
    assert fs.read_text("obj/main.o") == "m|8"
    data = only_entry(volume)
    assert (data["stored_at"], data["last_used"]) == (
        "2024-06-03T09:00:00Z", "2024-06-03T09:00:00Z")
