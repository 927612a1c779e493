"""Reading YAML cassettes an entry at a time: safe_load's values, one interaction held at a
time, and a clear error for whatever does not read."""

from __future__ import annotations

import io
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from forkpoint.cassettes.formats import text, yaml_values
from forkpoint.errors import CassetteError


def fast(document: str) -> Any:
    """The document as the reader builds a value, from libyaml's events."""
    reader = yaml_values._Reader(io.BytesIO(document.encode()), "t.yaml")
    try:
        reader.get_event()
        if reader.check_event(yaml.StreamEndEvent):
            return None
        reader.get_event()
        return reader.value()
    finally:
        reader.dispose()


def typed(value: Any) -> Any:
    """`value` with every type spelled out, order kept: in Python `1 == True == 1.0`."""
    if isinstance(value, dict):
        return ("dict", [(typed(k), typed(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("list", [typed(item) for item in value])
    return (type(value).__name__, repr(value))  # repr: a NaN is the same as a NaN


TEXT = st.text(st.characters(exclude_categories=("Cs",)))  # a YAML file holds no surrogates
LEAVES = st.none() | st.booleans() | st.integers() | st.floats() | TEXT
KEYS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT
VALUES = st.recursive(
    LEAVES, lambda inner: st.lists(inner) | st.dictionaries(KEYS, inner), max_leaves=25
)
STYLES = st.fixed_dictionaries(
    {
        "default_flow_style": st.sampled_from([False, True, None]),
        "default_style": st.sampled_from([None, '"', "'", "|", ">"]),
        "canonical": st.booleans(),
        "allow_unicode": st.booleans(),
        "width": st.sampled_from([20, 80, 1000]),
        "indent": st.sampled_from([2, 4]),
        "explicit_start": st.booleans(),
        "sort_keys": st.booleans(),
    }
)


@settings(deadline=None)
@given(VALUES, STYLES)
def test_the_fast_reader_gives_safe_loads_values_for_any_dumped_document(value, style):
    document = yaml.safe_dump(value, **style)
    assert typed(fast(document)) == typed(yaml.safe_load(document))


# Plain scalars YAML 1.1 (PyYAML's) reads as something other than a string, and their kin.
SCALARS = [
    "0x1A", "1_000", "0o17", "017", "0b101", "190:20:30", "-0", "+12", "12",
    ".inf", "-.Inf", ".NaN", "1e3", "1.5e+3", "6.8523015e+5", "685_230.15", "1.0",
    "yes", "No", "on", "OFF", "y", "true", "False", "~", "null", "Null",
    "2001-12-14", "2001-12-14t21:59:43.10-05:00", "2001-12-14 21:59:43.10", "2002-12-14 1:2:3Z",
    "!!binary aGVsbG8=", "!!str 12", "!!float 1", "!!int '7'", "!!bool yes", "!!null ''",
    "'quoted: 1'", '"a\\tb\\u00e9"', "plain text", "'*/*'",
]  # fmt: skip


@settings(deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(SCALARS), st.sampled_from(["", *SCALARS]))),
    st.lists(st.sampled_from(SCALARS)),
    st.booleans(),
)
def test_the_fast_reader_reads_every_kind_of_scalar_as_safe_load(pairs, items, flow):
    if flow:
        entries = [f"{k}: {v}" for k, v in pairs] + [f"items: [{', '.join(items)}]"]
        document = "{" + ", ".join(entries) + "}\n"
    else:
        document = "".join(f"{k}: {v}\n" for k, v in pairs) + "items:\n"
        document += "".join(f"- {item}\n" for item in items)
    assert typed(fast(document)) == typed(yaml.safe_load(document))


@pytest.mark.parametrize(
    "document",
    [
        "a: 0x1A\nb: 1_000\nc: 0o17\nd: 017\ne: .inf\nf: 1e3\ng: yes\nh: on\ni: ~\n",
        "a: 2001-12-14t21:59:43.10-05:00\nb: 2002-12-14\nc: !!binary aGVsbG8=\n",
        "a: 1\na: 2\nb: {c: 1, c: 2}\n",  # the last of a duplicate key wins
        "a: {1: x, 2.5: y, null: z, true: w, on: v, 1.0: u}\n",  # 1, true, on, 1.0: one key
    ],
)
def test_an_entry_reads_as_safe_load_reads_it(document):
    """Each top-level entry, read on its own, is what safe_load gives for it."""
    read = yaml_values.Document(io.BytesIO((document + "interactions: []\n").encode()), "t.yaml")
    values = {entry.path[0]: entry.value for entry in read.entries(interactions=True)}
    expected = {str(k): v for k, v in yaml.safe_load(document).items() if isinstance(k, str)}
    assert typed(values) == typed(expected)


INTERACTION = (
    "interactions:\n"
    "- request: {{method: GET, uri: 'http://x/', headers: {{x-h: [{value}]}}}}\n"
    "  response: {{status: {{code: 200}}}}\n"
)


@pytest.mark.parametrize(
    "value, message",
    [
        ("1" + "0" * 100_000, "a number of 100001 characters is not read"),  # a traceback before
        ("-" + "9" * 5000 + ".5e+1", "a header's value should be text, not -inf"),
        ("2024-13-45", "timestamp '2024-13-45' does not read"),
        ("!!binary '@@@'", "a header's value should be text, not b''"),
        # what no cassette needs: refused (before, PyYAML built them)
        ("!foo 1", "!foo is not read in a cassette"),
        ("=", "!!value is not read in a cassette"),
        ("!!set {a, b}", "!!set is not read in a cassette"),
        ("{<<: {a: b}}", "a merge key (<<) is not read in a cassette"),
        ("{? [a, b] : 1}", "a key that is a list or a map is not read in a cassette"),
        ("[" * 990 + "]" * 990, "nests too deep"),
    ],
)
def test_a_value_that_does_not_read_is_an_error_naming_its_line(value, message):
    document = "# a cassette\n" + INTERACTION.format(value=value)
    with pytest.raises(CassetteError) as caught:
        text.loads(document, source="t.yaml")
    error = str(caught.value)
    assert error.startswith("t.yaml") and message in error, error
    assert "\n" not in error and len(error) < 300
    if "not valid YAML" not in message and "deep" not in message:
        assert error.startswith("t.yaml, line 3: interaction 0, request.headers.x-h"), error


@pytest.mark.parametrize(
    "document, message",
    [
        ("--- {interactions: []}\n--- 2\n", "line 2: not valid YAML (but found another document"),
        ("a: b: c\n", "line 1: not valid YAML"),
        ("interactions: {}\n", "line 1: not a cassette: `interactions` is not a list"),
        ("interactions: []\ninteractions: []\n", "line 2: `interactions` is given twice"),
        ("- 1\n", "line 1: not a cassette: it has no `interactions` list"),
        ("", "line 1: not a cassette: it has no `interactions` list"),
    ],
)
def test_a_document_that_is_no_cassette_says_so_naming_its_line(document, message):
    with pytest.raises(CassetteError) as caught:
        text.loads(document, source="t.yaml")
    assert str(caught.value).startswith(f"t.yaml, {message}"), str(caught.value)
