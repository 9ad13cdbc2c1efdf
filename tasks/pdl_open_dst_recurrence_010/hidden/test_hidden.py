from datetime import date, datetime, time, timedelta

from src.agenda import Agenda
from src.meetings import Meeting
from src.recurrence import TH, WORKDAYS, RecurrenceRule
from src.reminders import next_occurrence
from src.zones import UTC


def hhmm(entries):
    return [(e.starts.date().isoformat(), e.starts.strftime("%H:%M")) for e in entries]


def standup(first_day=date(2025, 3, 3)):
    return Meeting(
        title="Stand-up",
        zone="Europe/Berlin",
        first_day=first_day,
        at=time(9, 0),
        duration=timedelta(minutes=15),
        rule=RecurrenceRule.weekly(WORKDAYS),
    )


def test_standup_stays_at_nine_after_clocks_go_forward():
    """README: "Each occurrence happens at that wall-clock time in that zone, on every day the recurrence rule produces, whatever the daylight-saving season." """
    entries = Agenda("Europe/Berlin").entries([standup()], date(2025, 3, 27), date(2025, 4, 2))
    assert hhmm(entries) == [
        ("2025-03-27", "09:00"),
        ("2025-03-28", "09:00"),
        ("2025-03-31", "09:00"),
        ("2025-04-01", "09:00"),
        ("2025-04-02", "09:00"),
    ]
    assert all(e.ends - e.starts == timedelta(minutes=15) for e in entries)


def test_summer_meeting_stays_at_nine_after_clocks_go_back():
    """Issue: "We looked ahead at October (clocks go back on Sunday 26 October): our Thursday sync, created in July for 09:00 Berlin time, shows at 08:00 from 27 October onwards, and the stand-up would do the same to anyone who sets it up over the summer." """
    sync = Meeting(
        title="Thursday sync",
        zone="Europe/Berlin",
        first_day=date(2025, 7, 3),
        at=time(9, 0),
        duration=timedelta(minutes=45),
        rule=RecurrenceRule.weekly([TH]),
    )
    meetings = [sync, standup(first_day=date(2025, 9, 1))]
    entries = Agenda("Europe/Berlin").entries(meetings, date(2025, 10, 22), date(2025, 10, 31))
    assert sorted(set(hhmm(entries))) == [
        ("2025-10-22", "09:00"),
        ("2025-10-23", "09:00"),
        ("2025-10-24", "09:00"),
        ("2025-10-27", "09:00"),
        ("2025-10-28", "09:00"),
        ("2025-10-29", "09:00"),
        ("2025-10-30", "09:00"),
        ("2025-10-31", "09:00"),
    ]
    assert [e.starts.date().day for e in entries if e.title == "Thursday sync"] == [23, 30]


def test_viewers_elsewhere_follow_the_berlin_wall_clock():
    """Issue: "Agendas in any viewer timezone and reminders should show the instants that result (so 09:00 in Berlin, 03:00 in New York and 16:00 in Tokyo for the stand-up from 31 March on)." """
    meeting = standup()
    new_york = Agenda("America/New_York").by_day([meeting], date(2025, 3, 6), date(2025, 4, 1))
    assert new_york[date(2025, 3, 7)][0].starts.strftime("%H:%M") == "03:00"
    assert new_york[date(2025, 3, 10)][0].starts.strftime("%H:%M") == "04:00"
    assert new_york[date(2025, 3, 28)][0].starts.strftime("%H:%M") == "04:00"
    assert new_york[date(2025, 3, 31)][0].starts.strftime("%H:%M") == "03:00"
    assert new_york[date(2025, 4, 1)][0].starts.strftime("%H:%M") == "03:00"
    tokyo = Agenda("Asia/Tokyo").entries([meeting], date(2025, 3, 28), date(2025, 3, 31))
    assert hhmm(tokyo) == [("2025-03-28", "17:00"), ("2025-03-31", "16:00")]
    utc = Agenda("UTC").entries([meeting], date(2025, 10, 24), date(2025, 10, 27))
    assert hhmm(utc) == [("2025-10-24", "07:00"), ("2025-10-27", "08:00")]


def test_next_occurrence_after_a_clock_change():
    """Issue: "Expected: every occurrence happens at the meeting's wall-clock time in the meeting's own timezone, on every day the rule produces, before and after clock changes…"

    Issue: "Agendas in any viewer timezone and reminders should show the instants that result…"
    """
    meeting = standup()
    spring = next_occurrence(meeting, datetime(2025, 3, 28, 8, 0, tzinfo=UTC))
    assert spring.day == date(2025, 3, 31)
    assert spring.start == datetime(2025, 3, 31, 7, 0, tzinfo=UTC)
    autumn = next_occurrence(meeting, datetime(2025, 10, 24, 7, 0, tzinfo=UTC))
    assert autumn.day == date(2025, 10, 27)
    assert autumn.start == datetime(2025, 10, 27, 8, 0, tzinfo=UTC)


def test_nightly_check_around_clock_changes():
    """Issue: "But every night after that it stays at 03:30 instead of going back to 02:30."

    README: "A wall-clock time that does not exist on a day (it falls in the hour skipped when the clocks go forward) is moved forward by the length of the gap: 02:30 on a night when clocks jump from 02:00 to 03:00 becomes 03:30."

    README: "A wall-clock time that happens twice (the hour repeated when the clocks go back) means the first of the two instants."
    """
    nightly = Meeting(
        title="Ops check",
        zone="Europe/Berlin",
        first_day=date(2025, 3, 27),
        at=time(2, 30),
        duration=timedelta(minutes=10),
    )
    spring = Agenda("Europe/Berlin").entries([nightly], date(2025, 3, 28), date(2025, 4, 1))
    assert hhmm(spring) == [
        ("2025-03-28", "02:30"),
        ("2025-03-29", "02:30"),
        ("2025-03-30", "03:30"),
        ("2025-03-31", "02:30"),
        ("2025-04-01", "02:30"),
    ]
    after = next_occurrence(nightly, datetime(2025, 3, 30, 12, 0, tzinfo=UTC))
    assert after.start == datetime(2025, 3, 31, 0, 30, tzinfo=UTC)
    autumn = Agenda("UTC").entries([nightly], date(2025, 10, 25), date(2025, 10, 27))
    assert [e.starts for e in autumn] == [
        datetime(2025, 10, 25, 0, 30, tzinfo=UTC),
        datetime(2025, 10, 26, 0, 30, tzinfo=UTC),
        datetime(2025, 10, 27, 1, 30, tzinfo=UTC),
    ]
