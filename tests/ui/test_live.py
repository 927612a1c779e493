"""What a live page has seen, as the event id it sends back (`Last-Event-ID`)."""

from __future__ import annotations

from forkpoint.ui.live import cursor, event, holds, seen


def test_seen_steps_round_trip_as_ranges():
    assert cursor([]) == ""
    assert cursor([5, 0, 1, 2, 3, 7, 8, 3]) == "0-3,5,7-8"
    assert seen("0-3,5,7-8") == ((0, 3), (5, 5), (7, 8))
    ranges = seen(cursor(range(1000)))
    assert ranges == ((0, 999),)
    assert holds(ranges, 999, set()) and not holds(ranges, 1000, set()) and holds((), 4, {4})


def test_a_cursor_that_is_not_one_is_nothing_seen():
    for bad in ("x", "3-1", "1,,2", "-1", "0-99999999999", None, ""):
        assert seen(bad) == (), bad


def test_an_event_of_several_lines():
    assert event("steps", "a\nb", "0-2") == b"event: steps\nid: 0-2\ndata: a\ndata: b\n\n"
