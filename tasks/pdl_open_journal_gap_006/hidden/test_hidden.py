import pytest

from src.codec import RecordCodec
from src.errors import ValidationError
from src.importer import RowImporter
from src.journal import Journal
from src.records import Entry

SCHEMAS = {
    "payment": {"id": str, "amount": int},
    "refund": {"id": str, "amount": int},
    "note": {"text": str},
}


def make_journal():
    return Journal(RecordCodec(SCHEMAS, max_payload_bytes=256))


def ids(records):
    return [r.payload.get("id", r.payload.get("text")) for r in records]


def test_appends_after_a_rejected_record_stay_visible():
    """Issue: "Every accepted record, from `append` or from a batch, is readable with `scan()` and `tail()` in order…" """
    journal = make_journal()
    journal.append("settlements", "payment", {"id": "p-1", "amount": 1200})
    with pytest.raises(ValidationError):
        journal.append("settlements", "refund", {"id": "r-1"})
    journal.append("settlements", "payment", {"id": "p-2", "amount": 300})
    with pytest.raises(ValidationError):
        journal.append("settlements", "note", {"text": "y" * 400})
    journal.append("settlements", "note", {"text": "done"})
    assert ids(journal.reader().scan()) == ["p-1", "p-2", "done"]


def test_rejected_record_does_not_use_up_a_sequence_number():
    """Issue: "…the sequence numbers of accepted records stay dense: the record after a rejected one simply gets the next number (in the example above `p-2` should be record 2)." """
    journal = make_journal()
    assert journal.append("settlements", "payment", {"id": "p-1", "amount": 1}) == 1
    with pytest.raises(ValidationError):
        journal.append("settlements", "chargeback", {"id": "c-1"})
    assert journal.append("settlements", "payment", {"id": "p-2", "amount": 2}) == 2
    records = list(journal.reader().scan())
    assert [r.seq for r in records] == [1, 2]
    assert journal.reader().horizon() == 2


def test_batch_with_rejections_keeps_every_accepted_record_readable():
    """Issue: "Every accepted record, from `append` or from a batch, is readable with `scan()` and `tail()` in order, and the sequence numbers of accepted records stay dense…"

    src/journal.py docstring: "…``append_batch`` stores every acceptable entry of the batch and reports the others as rejections."
    """
    journal = make_journal()
    first = journal.append_batch(
        [
            Entry("settlements", "payment", {"id": "p-1", "amount": 1}),
            Entry("settlements", "refund", {"id": "r-1"}),
            Entry("settlements", "payment", {"id": "p-2", "amount": 2}),
            Entry("settlements", "payment", {"id": "p-3", "amount": "3.00"}),
            Entry("settlements", "payment", {"id": "p-4", "amount": 4}),
        ]
    )
    assert [r.index for r in first.rejected] == [1, 3]
    assert first.accepted == [1, 2, 3]
    second = journal.append_batch([Entry("settlements", "refund", {"id": "r-2", "amount": 2})])
    assert second.accepted == [4]
    records = list(journal.reader().scan())
    assert ids(records) == ["p-1", "p-2", "p-4", "r-2"]
    assert [r.seq for r in records] == [1, 2, 3, 4]


def test_tail_consumer_keeps_up_after_a_rejection():
    """README: "A consumer that remembers the last sequence number it processed and resumes with `tail(after_seq=...)` therefore never misses a record." """
    journal = make_journal()
    reader = journal.reader()
    journal.append("settlements", "payment", {"id": "p-1", "amount": 1})
    cursor = reader.tail(after_seq=0)[-1].seq
    with pytest.raises(ValidationError):
        journal.append("settlements", "payment", {"id": "p-2"})
    journal.append("settlements", "payment", {"id": "p-3", "amount": 3})
    journal.append("settlements", "refund", {"id": "r-1", "amount": 1})
    batch = reader.tail(after_seq=cursor)
    assert ids(batch) == ["p-3", "r-1"]
    cursor = batch[-1].seq
    journal.append("settlements", "note", {"text": "late"})
    assert ids(reader.tail(after_seq=cursor)) == ["late"]


def test_import_with_bad_rows_is_fully_readable_afterwards():
    """Issue: "But nothing that was written after that row is visible to `scan()` or `tail()` any more: not the rest of the file, and not anything appended later either, including the following nights' imports."

    Issue: "…the import report itself looks right: the bad row is listed in `rejected` with its row number and `imported` counts the others."
    """
    journal = make_journal()
    importer = RowImporter(journal, "settlements", batch_size=3)
    night_one = [
        {"type": "payment", "id": "p-1", "amount": "1200"},
        {"type": "refund", "id": "r-1", "amount": ""},
        {"type": "payment", "id": "p-2", "amount": "300"},
        {"type": "payment", "id": "p-3", "amount": "75"},
        {"type": "adjustment", "id": "a-1", "amount": "5"},
        {"type": "refund", "id": "r-2", "amount": "20"},
    ]
    report = importer.run(night_one)
    assert report.imported == 4
    assert [r.row for r in report.rejected] == [2, 5]
    night_two = [{"type": "payment", "id": "p-4", "amount": "10"}]
    second = importer.run(night_two)
    records = list(journal.reader().scan())
    assert ids(records) == ["p-1", "p-2", "p-3", "r-2", "p-4"]
    assert second.last_seq == records[-1].seq
