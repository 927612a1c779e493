"""The body differences of a divergence report, for bodies as deep as a request may send."""

from __future__ import annotations

import orjson
import pytest

from forkpoint.engine.bodydiff import json_diff


@pytest.mark.parametrize("depth", [300, 1000])
def test_a_body_nested_deeper_than_can_be_shown_or_walked_is_reported_not_raised(depth):
    # orjson writes at most 254 levels, and 1,000 are past what a recursive walk may take;
    # a replay of such a request (the fuzzer sent one) got forkpoint's 500 and a traceback
    got = orjson.loads(b"[" * depth + b"1" + b"]" * depth)  # as the gateway parses a body
    lines = json_diff({"messages": []}, got)
    assert lines and all(isinstance(line, str) for line in lines)
    assert any("too deep" in line for line in lines)


def test_two_deep_bodies_are_walked_to_a_depth_and_differ_there():
    recorded = orjson.loads(b"[" * 1000 + b"1" + b"]" * 1000)
    got = orjson.loads(b"[" * 1000 + b"2" + b"]" * 1000)
    [line] = json_diff(recorded, got)
    assert line.startswith("$" + "[0]" * 100 + ": ") and "too deep to show" in line
    assert json_diff(recorded, orjson.loads(b"[" * 1000 + b"1" + b"]" * 1000)) == []  # the same


def test_shallow_bodies_are_shown_as_before():
    assert json_diff({"a": 1, "b": [1, 2]}, {"a": 2, "b": [1, 2]}) == ["$.a: 1 → 2"]
