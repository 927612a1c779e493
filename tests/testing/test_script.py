"""What a script sees of a request: the structured-output schema in each dialect."""

from __future__ import annotations

import pytest

from forkpoint.testing.script import parse_prompt

SCHEMA = {"type": "object", "properties": {"refund": {"type": "boolean"}}}
ASK = [{"role": "user", "content": "refund?"}]


@pytest.mark.parametrize(
    ("dialect", "body"),
    [
        (
            "openai_chat",
            {
                "messages": ASK,
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "D", "schema": SCHEMA, "strict": True},
                },
            },
        ),
        (
            "openai_responses",
            {
                "input": ASK,
                "text": {
                    "format": {"type": "json_schema", "name": "D", "schema": SCHEMA, "strict": True}
                },
            },
        ),
        (
            "anthropic_messages",
            {
                "messages": ASK,
                "output_config": {"format": {"type": "json_schema", "schema": SCHEMA}},
            },
        ),
    ],
)
def test_output_schema_is_read_from_each_dialect(dialect, body):
    assert parse_prompt(dialect, {"model": "m", **body}).output_schema == SCHEMA


@pytest.mark.parametrize(
    ("dialect", "body"),
    [
        ("openai_chat", {"messages": ASK}),
        ("openai_chat", {"messages": ASK, "response_format": {"type": "json_object"}}),
        ("openai_responses", {"input": "refund?", "text": {"format": {"type": "text"}}}),
        ("anthropic_messages", {"messages": ASK, "output_config": {"effort": "low"}}),
    ],
)
def test_no_schema_without_a_json_schema_format(dialect, body):
    assert parse_prompt(dialect, {"model": "m", **body}).output_schema is None
