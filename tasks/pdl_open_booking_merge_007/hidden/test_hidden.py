from src.availability import first_fit, free_slots, free_slots_for
from src.booking_calendar import RoomCalendar
from src.intervals import Span
from src.models import Booking, Room
from src.schedule import render_blocks, render_day, render_room


def make_calendar():
    return RoomCalendar([Room.with_hours("Aurora", "08:00", "18:00"), Room("Borealis")])


def booking(start, end, booking_id=0, room="Aurora"):
    return Booking(booking_id, room, Span.parse(start, end))


def test_back_to_back_bookings_render_as_one_block():
    """Issue: "Expected: bookings that touch or overlap are shown as one continuous block (09:00-10:00 followed by 10:00-11:00 renders as 09:00-11:00…"

    src/schedule.py docstring: "One line for a room, e.g. ``"Aurora: 09:00-11:00, 14:00-15:00"``."
    """
    calendar = make_calendar()
    calendar.book("Aurora", "09:00", "10:00", "Standup")
    calendar.book("Aurora", "10:00", "11:00", "Design review")
    calendar.book("Aurora", "14:00", "15:00", "1:1")
    assert render_room(calendar, "Aurora") == "Aurora: 09:00-11:00, 14:00-15:00"


def test_chain_of_touching_and_overlapping_bookings_is_one_block():
    """Issue: "Expected: bookings that touch or overlap are shown as one continuous block (… also across longer chains such as 09:00-10:00, 10:00-11:00, 10:30-12:00, 12:00-13:00)…"

    src/clock.py docstring: "Input is lenient about format (``9:00``, ``09:00``, ``0900``, ``9.00``); output is always ``HH:MM``."
    """
    bookings = [
        booking("12:00", "13:00", 4),
        booking("9:00", "10:00", 1),
        booking("10:30", "12:00", 3),
        booking("10.00", "1100", 2),
        booking("14:00", "15:00", 5),
        booking("15:30", "16:00", 6),
    ]
    assert render_blocks(bookings) == ["09:00-13:00", "14:00-15:00", "15:30-16:00"]


def test_free_slots_around_back_to_back_bookings():
    """Issue: "…and the free slots are simply the gaps around those blocks, e.g. with the bookings above: 08:00-09:00 and 11:00-18:00."

    Issue: "The free-slot list (and the "first slot that fits" suggestion on the booking form) fails with the ValueError above for any room that has back-to-back bookings…"
    """
    calendar = make_calendar()
    calendar.book("Aurora", "09:00", "10:00")
    calendar.book("Aurora", "10:00", "11:00")
    calendar.book("Aurora", "11:00", "11:30")
    calendar.book("Aurora", "13:00", "14:00")
    assert [str(s) for s in free_slots_for(calendar, "Aurora")] == [
        "08:00-09:00",
        "11:30-13:00",
        "14:00-18:00",
    ]
    assert str(first_fit(calendar, "Aurora", 75)) == "11:30-12:45"


def test_free_slots_of_a_booking_list_with_touching_bookings():
    """Issue: "The free-slot list (and the "first slot that fits" suggestion on the booking form) fails with the ValueError above for any room that has back-to-back bookings, and the same happens when we compute free slots from an imported list of bookings."

    src/availability.py docstring: "Gaps shorter than ``min_minutes`` are left out."
    """
    bookings = [
        booking("10:00", "11:00", 1),
        booking("11:00", "12:00", 2),
        booking("12:00", "12:15", 3),
        booking("15:00", "16:00", 4),
        booking("16:00", "16:45", 5),
    ]
    window = Span.parse("09:00", "17:00")
    assert [str(s) for s in free_slots(bookings, window, min_minutes=30)] == [
        "09:00-10:00",
        "12:15-15:00",
    ]
    assert [str(s) for s in free_slots(bookings, window)] == [
        "09:00-10:00",
        "12:15-15:00",
        "16:45-17:00",
    ]


def test_day_overview_with_back_to_back_bookings():
    """Issue: "The day overview (`render_day`) shows the split blocks too."

    src/schedule.py docstring: "One line per room, rooms sorted by name."
    """
    calendar = make_calendar()
    calendar.book("Borealis", "13:00", "14:00")
    calendar.book("Borealis", "14:00", "14:30")
    calendar.book("Aurora", "08:00", "08:30")
    assert render_day(calendar) == "Aurora: 08:00-08:30\nBorealis: 13:00-14:30"
