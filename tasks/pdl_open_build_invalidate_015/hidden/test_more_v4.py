"""More of docs/cache-retention.md: an age limit longer than any calendar can span."""

import json
from datetime import datetime, timezone

from src.builder import Builder
from src.cache import ArtifactCache
from src.fs import MemoryFS
from src.targets import Project

ROOT = "cache"


class Clock:
    def __init__(self, when):
        self.now = when

    def __call__(self):
        return self.now


def copy(ctx):
    ctx.write_bytes(ctx.outputs[0], ctx.read_bytes(ctx.inputs[0]))


def store(volume, when, **contents):
    """A fresh checkout builds the named targets against the cache on ``volume``."""
    p = Project()
    for name in contents:
        p.add(name, copy, inputs=[f"src/{name}.txt"], outputs=[f"out/{name}.bin"])
    cache = ArtifactCache(volume, ROOT, clock=Clock(when))
    fs = MemoryFS({f"src/{name}.txt": text for name, text in contents.items()})
    result = Builder(p, fs, cache=cache).build()
    assert result.ran == sorted(contents)


def test_a_max_age_longer_than_any_calendar_expires_nothing():
    """Docs (docs/cache-retention.md): "A `RetentionPolicy` has three optional
    parts: `max_age_days`, `max_bytes`, and `keep`" and "With `max_age_days`
    set, an entry expires when its `last_used` lies more than that many days
    before now"; src/retention.py: "``max_age_days`` expires entries that were
    not used for longer than that" (the policy refuses only negative values).
    No entry of 2024 was last used more than 10^10 days before now, so a
    prune with that age expires nothing, and the other steps still apply."""
    from src.retention import RetentionPolicy, prune

    volume = MemoryFS()
    store(volume, datetime(2024, 1, 10, tzinfo=timezone.utc), old="o" * 40)
    store(volume, datetime(2024, 1, 10, 0, 0, 1, tzinfo=timezone.utc), old="p" * 30)
    store(volume, datetime(2024, 6, 1, tzinfo=timezone.utc), new="n" * 20)
    keys = {}
    prefix = f"{ROOT}/entries/"
    for path, data in volume.snapshot().items():
        if path.startswith(prefix):
            keys[json.loads(data)["outputs"][0]] = path[len(prefix):-len(".json")]
    import hashlib

    older = keys[hashlib.sha256(b"o" * 40).hexdigest()]
    now = datetime(2024, 7, 1, tzinfo=timezone.utc)

    for age in (1e10, float("inf")):
        files = volume.snapshot()
        report = prune(ArtifactCache(MemoryFS(files), ROOT, clock=Clock(now)),
                       RetentionPolicy(max_age_days=age), dry_run=True)
        assert report.removed == []
        assert report.kept == 3
        assert report.summary() == "dry run: pruned 0 entries, freed 0 B, 3 entries kept"

    # With a budget as well, only the budget removes anything.
    report = prune(ArtifactCache(volume, ROOT, clock=Clock(now)),
                   RetentionPolicy(max_age_days=1e10, max_bytes=60))
    assert [(r.key, r.target, r.reason) for r in report.removed] == [
        (older, "old", "over budget")
    ]
    assert (report.size_before, report.size_after, report.kept) == (90, 50, 2)
    assert report.over_budget is False
