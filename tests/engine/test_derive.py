"""`derive` reads a request body's JSON once for the summary and the fingerprint: each must
come out as it does when read on its own."""

from __future__ import annotations

import gzip
from typing import Any

from forkpoint.engine.derive import derive
from forkpoint.engine.dialects import summarize_exchange
from forkpoint.engine.matching import MatchConfig, fingerprint
from tests.builders import exchange

BODY = b'{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"user":"u1"}'
ANSWER = b'{"model":"gpt-4o-2024","choices":[{"index":0,"message":{"content":"yo"}}]}'


def _alone(ex: Any, match: MatchConfig) -> str:
    return fingerprint(ex.method, ex.route, ex.asked, ex.request_headers, match, masked=True)


def _drop_in_place(method: str, route: str, value: Any) -> Any:
    """A user's normalizer that changes the value it is handed, as one may."""
    if isinstance(value, dict):
        value.pop("user", None)
        value.pop("model", None)
    return value


def test_summary_and_fingerprint_are_those_read_alone():
    match = MatchConfig(normalizers=(_drop_in_place,))
    derived = derive(exchange(request_body=BODY, response_body=ANSWER), match)
    alone = exchange(request_body=BODY, response_body=ANSWER)
    assert derived.fingerprint == _alone(alone, match)
    assert derived.summary == summarize_exchange(alone)
    assert derived.summary is not None and derived.summary.text == "yo"


def test_a_rewritten_or_encoded_request_is_read_as_its_own_bytes():
    match = MatchConfig()
    forked = exchange(request_body=BODY, asked_body=BODY.replace(b"hi", b"ho"))
    headers = (("Content-Type", "application/json"), ("Content-Encoding", "gzip"))
    encoded = exchange(request_body=gzip.compress(BODY), request_headers=headers)
    for ex in (forked, encoded):
        alone_fingerprint = _alone(ex, match)
        derived = derive(ex, match)
        assert derived.fingerprint == alone_fingerprint
    assert forked.fingerprint != derive(exchange(request_body=BODY), match).fingerprint
    assert encoded.fingerprint == derive(exchange(request_body=BODY), match).fingerprint
