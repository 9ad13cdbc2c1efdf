import random
from datetime import datetime, timedelta, timezone

from src.paginator import FeedPaginator
from src.sorting import SortSpec
from src.store import ActivityStore

T0 = datetime(2024, 6, 3, 10, 0, tzinfo=timezone.utc)


def walk(paginator, **kwargs):
    seen, cursor = [], None
    for _ in range(1000):
        page = paginator.page(cursor, **kwargs)
        seen.extend(item.id for item in page.items)
        if not page.has_more:
            return seen
        cursor = page.next_cursor
    raise AssertionError("pagination did not terminate")


def expected(store, sort, actor=None):
    """Documented feed order: the sort attribute, ties broken by id, same direction."""
    rows = [store.get(n) for n in range(1, len(store) + 1)]
    rows = [a for a in rows if actor is None or a.actor == actor]
    rows.sort(key=lambda a: (getattr(a, sort.field), a.id), reverse=sort.descending)
    return [a.id for a in rows]


def test_issue_example_shows_every_item():
    """Issue: "Expected: walking the pages with the cursors returns every activity exactly once (no gaps, no duplicates)…" """
    store = ActivityStore()
    for target, second in [("a", 5), ("b", 4), ("c", 3), ("d", 3), ("e", 2), ("f", 1)]:
        store.record("ana", "liked", target, T0 + timedelta(seconds=second))
    paginator = FeedPaginator(store, page_size=3)
    first = paginator.page()
    second = paginator.page(first.next_cursor)
    assert [a.target for a in first.items] == ["a", "b", "c"] or [
        a.target for a in first.items
    ] == ["a", "b", "d"]
    targets = [a.target for a in first.items + second.items]
    assert sorted(targets) == ["a", "b", "c", "d", "e", "f"]
    assert second.next_cursor is None


def test_bulk_import_with_one_timestamp_spanning_several_pages():
    """Issue: "Expected: walking the pages with the cursors returns every activity exactly once (no gaps, no duplicates), in the same order as the unpaginated feed, whatever the page size, the sort and how many rows share a timestamp."

    src/sorting.py docstring: "Ordering is made total by breaking ties on the activity id, in the same direction as the primary attribute, so two listings of the same rows always agree."
    """
    store = ActivityStore()
    store.record("ops", "deployed", "api", T0 + timedelta(hours=1))
    for n in range(10):
        store.record("importer", "created", f"ticket-{n}", T0)
    store.record("ops", "deployed", "web", T0 - timedelta(hours=1))
    sort = SortSpec.parse("-created_at")
    for size in (2, 3, 4):
        ids = walk(FeedPaginator(store, sort, page_size=size))
        assert ids == expected(store, sort), size
        assert len(set(ids)) == 12


def test_ascending_feed_with_ties_at_page_boundaries():
    """Issue: "Expected: walking the pages with the cursors returns every activity exactly once (no gaps, no duplicates), in the same order as the unpaginated feed, whatever the page size, the sort and how many rows share a timestamp."

    src/sorting.py docstring: "Ordering is made total by breaking ties on the activity id, in the same direction as the primary attribute, so two listings of the same rows always agree."
    """
    store = ActivityStore()
    for n in range(8):
        store.record("ben", "edited", f"page-{n}", T0 + timedelta(minutes=n // 2))
    sort = SortSpec.parse("created_at")
    ids = walk(FeedPaginator(store, sort, page_size=3))
    assert ids == expected(store, sort)
    assert sorted(ids) == list(range(1, 9))


def test_every_item_exactly_once_for_any_page_size_and_sort():
    """Issue: "Expected: walking the pages with the cursors returns every activity exactly once (no gaps, no duplicates), in the same order as the unpaginated feed, whatever the page size, the sort and how many rows share a timestamp."

    src/sorting.py docstring: "Ordering is made total by breaking ties on the activity id, in the same direction as the primary attribute, so two listings of the same rows always agree."
    """
    rng = random.Random(20240603)
    store = ActivityStore()
    for n in range(40):
        store.record(
            rng.choice(["ana", "ben", "cy"]),
            "viewed",
            f"item-{n}",
            T0 + timedelta(seconds=rng.randrange(6)),
        )
    for expression in ("-created_at", "created_at", "actor", "-actor"):
        sort = SortSpec.parse(expression)
        for size in range(1, 8):
            paginator = FeedPaginator(store, sort, page_size=size)
            assert walk(paginator) == expected(store, sort), (expression, size)
            assert [a.id for a in paginator.iter_items(actor="cy")] == expected(
                store, sort, actor="cy"
            ), (expression, size)


def test_new_activity_at_the_head_does_not_disturb_later_pages():
    """Issue: "New activities recorded while someone is scrolling must not make the pages they have not fetched yet skip or repeat items." """
    store = ActivityStore()
    for target, second in [("a", 5), ("b", 4), ("c", 3), ("d", 3), ("e", 2), ("f", 1)]:
        store.record("ana", "liked", target, T0 + timedelta(seconds=second))
    paginator = FeedPaginator(store, page_size=3)
    first = paginator.page()
    store.record("ana", "liked", "g", T0 + timedelta(seconds=9))
    second = paginator.page(first.next_cursor)
    targets = [a.target for a in first.items + second.items]
    assert sorted(targets) == ["a", "b", "c", "d", "e", "f"]
    assert len(targets) == 6
