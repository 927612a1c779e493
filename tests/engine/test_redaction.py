"""Redaction with plain data: names in any case, shapes by either scanner, values known from
a request masked wherever else the exchange holds them, multipart text fields, URLs' userinfo."""

from __future__ import annotations

import base64
import json
import pickle

import pytest

from forkpoint.engine import known, members, redaction, shapes
from forkpoint.engine.changes import Change
from forkpoint.engine.redaction import Redaction
from forkpoint.engine.secret_names import secret_header, secret_name
from forkpoint.engine.urls import without_userinfo
from forkpoint.models import Chunk

JSON = (("content-type", "application/json"),)
KEY = "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5q" * 2


@pytest.mark.parametrize(
    "name, secret",
    [
        ("x-rapidapi-key", True), ("X-RapidAPI-Key", True), ("x-honeycomb-team", True),
        ("X-Honeycomb-Team", True), ("dd-application-key", True), ("x-foo-key", True),
        ("cb-access-passphrase", True), ("x-goog-iap-jwt-assertion", True),
        ("x-amzn-oidc-accesstoken", True), ("idempotency-key", False),
        ("sec-websocket-key", False), ("x-ratelimit-remaining-tokens", False),
        ("content-type", False), ("x-amzn-oidc-data", False),  # a JWT: found by its shape
    ],
)  # fmt: skip
def test_a_header_name_is_judged_in_any_case(name, secret):
    assert secret_header(name) is secret
    assert secret_header(name.lower()) is secret and secret_header(name.upper()) is secret


@pytest.mark.parametrize(
    "name, secret",
    [
        ("passphrase", True), ("accesstoken", True), ("clientsecret", True), ("hapikey", True),
        ("secretAccessKey", True), ("app_key", True), ("max_tokens", False),
        ("prompt_cache_key", False), ("primaryKey", False), ("accessKeyId", False),
        ("monkey", False), ("author", False),
    ],
)  # fmt: skip
def test_a_field_name_is_a_secret_by_its_words_or_their_endings(name, secret):
    assert secret_name(name) is secret


def test_appid_is_a_secret_query_parameter():
    assert Redaction().route("/data/2.5/weather?q=Paris&appid=abc123") == (
        "/data/2.5/weather?q=Paris&appid=%5Bredacted%5D"
    )


NEW = {
    "groq": "gsk_" + "Ab3dEf6hIj9kLm2nOp5q" * 2 + "Rs8tUv1wXy4z",
    "huggingface": "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh",
    "xai": "xai-" + "Ab3dEf6hIj9kLm2nOp5q" * 4,
    "perplexity": "pplx-" + "Ab3dEf6hIj9kLm2nOp5q" * 2 + "Rs8tUv1w",
    "google-oauth": "ya29." + "a0AfB_byC" + "Ab3dEf6hIj9kLm2nOp5q" * 3,
    "gitlab": "glpat-" + "Ab3dEf6hIj9kLm2nOp5q",
    "npm": "npm_" + "Ab3dEf6hIj9kLm2nOp5q" + "Rs8tUv1wXy4zAb3d",
    "telegram": "123456789:AA" + "Hd3TcvCH1vGWJxfSeofSAs0K5PALDsaw0",
    "database-url": "postgres://admin:" + "hunter2x" + "@db.internal/app",
}
SCANNERS = {"re2": shapes.re2_scanner(), "re": shapes.re_scanner()}


@pytest.mark.parametrize("scanner", sorted(SCANNERS))
@pytest.mark.parametrize("kind", sorted(NEW))
def test_newer_key_shapes_are_found_by_either_scanner(kind, scanner):
    text = json.dumps({"content": f"use\n{NEW[kind]} now"}).encode()  # after a `\n`
    found = SCANNERS[scanner](text)
    assert found, kind
    masked = text
    for begin, end in sorted(found, reverse=True):
        masked = masked[:begin] + b"[redacted]" + masked[end:]
    assert b"hunter2x" not in masked and NEW[kind].encode() not in masked
    assert json.loads(masked)["content"].startswith("use\n")


@pytest.mark.parametrize("scanner", sorted(SCANNERS))
def test_both_scanners_leave_the_same_words_alone(scanner):
    for text in (b"sk-learn-is-a-python-library-for-ml", b"task-sk-is-not-a-key-at-all-here",
                 b"peek_" + b"a" * 30, b"ghp_short", b"-----BEGIN PRIVATE KEY----- never ends"):  # fmt: skip
        assert SCANNERS[scanner](text) == [], text


@pytest.mark.parametrize("scanner", sorted(SCANNERS))
def test_a_key_after_a_byte_that_is_not_utf8_is_found_by_either_scanner(scanner):
    for before in (b"\xff", b"\xe9", b"\x80 "):  # Latin-1 text, a stray byte
        text = before + KEY.encode() + b" and more"
        begin = len(before)
        assert SCANNERS[scanner](text) == [(begin, begin + len(KEY))], before


# A member search answers as `re` does: for a hint with True, an object or a list value too.
MEMBER_HINTS = [(b"token", False), (b"secret", True), (b"my-name", False)]
MEMBER_TEXTS = {
    b'{"max_tokens": 512, "content": "0.5 tokens a second"}': False,
    b'{"access_token": "abc"}': True,
    b'{"access_token" :\t"abc"}': True,
    b'{"client_secret": {"value": "abc"}}': True,
    b'{"token_count": [1, 2]}': False,
    b'{"my-name": "abc"}': True,
    b'{"args": "{\\"token\\": \\"abc\\"}"}': True,  # JSON carried in a string
    b'\xff\xfe{"x\xe9token": "abc"}': True,  # around bytes that are not UTF-8
    b'{"' + b"\xe9" * 70 + b'token": "abc"}': True,
    b'{"token' + b"x" * 81 + b'": "abc"}': False,  # past what a member's name may be
    b'{"token\v: "abc"}': False,
    b'{"token"\v:\v"abc"}': True,  # `re`'s whitespace, which RE2's leaves out
    b'{"Access_TOKEN": "abc"}': True,  # a name in any case
    b'{"ARGS": "{\\"Token\\": \\"abc\\"}"}': True,
    b'{"MY-NAME": "abc"}': True,
    b'{"MAX_TOKENS": 512, "CONTENT": "0.5 TOKENS a second"}': False,
}


@pytest.mark.parametrize("engine", [True, False], ids=["re2", "re"])
def test_a_member_search_finds_what_re_finds_in_any_bytes(monkeypatch, engine):
    monkeypatch.setattr(members, "_RE2", engine)
    search = members.named_search(MEMBER_HINTS)
    for text, found in MEMBER_TEXTS.items():
        assert search(text) is found, text


def test_a_secret_member_after_bytes_that_are_not_utf8_is_masked():
    body = b'{"note": "caf\xe9 \xff", "api_key": "abc123", "n": 1}'
    masked = Redaction().body(body, JSON)
    assert masked == b'{"note": "caf\xe9 \xff", "api_key": "[redacted]", "n": 1}'


def test_a_body_over_a_mebibyte_is_scanned():
    body = json.dumps({"content": "x" * (3 << 20) + f" {KEY}"}).encode()
    masked = Redaction().body(body, JSON)
    assert KEY.encode() not in masked and masked.endswith(b' [redacted]"}')


def test_a_jwt_in_a_header_value_is_masked_and_the_others_kept():
    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9P"
    headers = (("X-Amzn-Oidc-Data", jwt), ("content-type", "text/plain"), ("x-rapidapi-key", "k"))
    assert Redaction().headers(headers) == (
        ("X-Amzn-Oidc-Data", "[redacted]"), ("content-type", "text/plain"),
        ("x-rapidapi-key", "[redacted]"),
    )  # fmt: skip


def test_a_known_value_is_masked_wherever_the_exchange_holds_it():
    token, password = "opaque-Token-77a1", "pw-Of-The-Gateway-9"
    basic = base64.b64encode(f"bob:{password}".encode()).decode()
    headers = (("Authorization", f"Bearer {token}"), ("Proxy-Thing", "x"))
    exchange, body = Redaction().request("/v1/x?api_key=q-Value-1234", headers, b'{"n": 1}')
    assert body == b'{"n": 1}'
    echoed = json.dumps({"got": f"Bearer {token}", "url": "/v1/x?api_key=q-Value-1234",
                         "slashed": "q\\/Value"}).encode()  # fmt: skip
    masked = exchange.body(echoed, JSON)
    assert b"opaque-Token" not in masked and b"q-Value-1234" not in masked
    assert exchange.text(f"refused {token}") == "refused [redacted]"
    assert exchange.headers((("X-Seen", token),)) == (("X-Seen", "[redacted]"),)
    # a value cut across chunks is masked in the chunk where it begins
    stream = f'data: {{"seen": "{token}"}}\n\n'.encode()
    cut = stream.index(b"Token")
    chunks = exchange.chunks([Chunk(1.0, stream[:cut]), Chunk(2.0, stream[cut:])], ())
    assert b"".join(c.data for c in chunks) == b'data: {"seen": "[redacted]"}\n\n'
    # Basic auth: the password it encodes; a value inside a longer word is left alone
    basics, _ = Redaction().request("/", (("authorization", f"Basic {basic}"),), b"")
    assert basics.text(f"user bob, password {password}!") == "user bob, password [redacted]!"
    assert exchange.text(f"x{token}y") == f"x{token}y"


def test_a_secret_fields_value_sent_in_the_body_is_known_too():
    exchange, body = Redaction().request(
        "/", JSON, json.dumps({"api_key": "body-Secret-991", "q": "hi"}).encode()
    )
    assert json.loads(body) == {"api_key": "[redacted]", "q": "hi"}
    assert exchange.body(b"invalid key body-Secret-991", ()) == b"invalid key [redacted]"


def test_a_body_without_a_known_value_is_returned_as_it_is():
    exchange, _ = Redaction().request("/", (("authorization", "Bearer opaque-Token-77a1"),), b"")
    body = json.dumps({"content": "nothing to see " * 1000}).encode()
    assert exchange.body(body, JSON) is body


def test_a_multipart_text_field_is_masked_by_name_and_shape_and_a_file_left_alone():
    file = b"%PDF-1.7 " + KEY.encode() + b" \x00\x01"
    body = (
        b'--b\r\nContent-Disposition: form-data; name="token"\r\n\r\nxoxb-opaque-1\r\n'
        b'--b\r\nContent-Disposition: form-data; name="comment"\r\n\r\nkey ' + KEY.encode() +
        b'\r\n--b\r\nContent-Disposition: form-data; name="file"; filename="a.pdf"\r\n\r\n'
        + file + b"\r\n--b--\r\n"
    )  # fmt: skip
    masked = Redaction().body(body, (("content-type", "multipart/form-data; boundary=b"),))
    assert b"xoxb-opaque-1" not in masked and b"key [redacted]\r\n" in masked
    assert file in masked and masked.count(KEY.encode()) == 1


def test_a_urls_userinfo_is_dropped_from_what_is_kept():
    assert (
        without_userinfo("https://u:p@h.example:8443/v1?x=a@b") == "https://h.example:8443/v1?x=a@b"
    )
    assert without_userinfo("http://h/a@b") == "http://h/a@b"
    assert Change(upstream="http://u:pw@h.example").to_json() == {"upstream": "http://h.example"}


def test_rules_pickle_as_what_they_are_made_of_and_mask_alike():
    rules = Redaction(names=frozenset({"X-Team-Pass"})).knowing((b"s3cr3t-value-1234",))
    again = pickle.loads(pickle.dumps(rules))  # as the writer process gets its match settings
    body = b'{"x-team-pass": "abc", "note": "s3cr3t-value-1234", "secret": {"a": "b"}}'
    assert again == rules and again.body(body, JSON) == rules.body(body, JSON)
    assert again.body(body, JSON).count(b"[redacted]") == 3


def test_what_a_process_remembers_of_the_secrets_it_saw_stays_small():
    remembered = known._remembered.cache_info().currsize
    large = "k3y" * (1 << 18)  # a secret member's value of 768 KiB: masked, not remembered
    body = json.dumps({"api_key": large, "note": f"again {large}"}).encode()
    _, masked = Redaction().request("/v1/x?" + "q=" * 2000, JSON, body)
    assert large.encode() not in masked
    assert known._remembered.cache_info().currsize == remembered
    assert known._remembered.cache_info().maxsize == 1024


def test_many_secret_names_are_each_found_and_said_nothing_of(capfd):
    rules = Redaction(names=frozenset(f"x-team-{i}-pass" for i in range(60)))
    body = b'{"x-team-59-pass": "abc", "note": "the budget of x-team-3 tokens"}'
    masked = rules.body(body, JSON)
    assert masked == b'{"x-team-59-pass": "[redacted]", "note": "the budget of x-team-3 tokens"}'
    assert rules.body(b'{"x-team-3-pass": "abc"}', JSON) == b'{"x-team-3-pass": "[redacted]"}'
    assert capfd.readouterr().err == ""  # RE2's automata stay within their memory


def test_a_secret_member_is_masked_whatever_the_case_of_its_name():
    body = b'{"API_KEY": "abc123", "Client_Secret": {"Value": "x"}, "Max_Tokens": 5}'
    masked = Redaction().body(body, JSON)
    assert masked == (
        b'{"API_KEY": "[redacted]", "Client_Secret": {"Value": "[redacted]"}, "Max_Tokens": 5}'
    )


def test_header_lists_remembered_stay_few_and_small():
    rules = Redaction()
    sent = (("authorization", f"Bearer {KEY}"), ("x-request-id", "req-1"))
    assert rules.headers(sent) == rules.headers(sent) == (
        ("authorization", "[redacted]"), ("x-request-id", "req-1")
    )
    for i in range(redaction.REMEMBERED * 2):  # an API's answers, each with an id of its own
        rules.headers((("x-request-id", f"req-{i}"),))
        rules.request("/v1/x", (("x-request-id", f"req-{i}"),), b"")
    assert len(redaction._MASKED) <= redaction.REMEMBERED
    assert len(redaction._SENDING) <= redaction.REMEMBERED
    redaction._MASKED.clear()
    large = (("x-large", "v" * redaction.REMEMBERED_BYTES),)  # worked out, not remembered
    assert rules.headers(large) == large and not redaction._MASKED


PEM = b"-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBg\\n-----END PRIVATE KEY-----"


def test_one_pass_for_names_and_shapes_masks_what_the_searches_each_mask():
    """Most bodies are read once, by an automaton of the secret names and the shapes'
    candidates together: what it lets through unread is what the two passes would mask."""
    gated = Redaction(names=frozenset({"x-team-pass"}))
    ungated = Redaction(names=frozenset({"x-team-pass"}))
    object.__setattr__(ungated, "anything", None)
    assert gated.anything is not None  # the test environment has the `fast` extra
    bodies = [
        *MEMBER_TEXTS,
        *(json.dumps({"content": f"use\n{key} now"}).encode() for key in NEW.values()),
        json.dumps({"messages": [{"role": "user", "content": "a long prompt " * 300}]}).encode(),
        b'{"x-team-pass": "abc", "note": "x-team-pass: abc"}',
        b'{"note": "' + PEM + b'", "n": 1}',  # a key block: no candidate, no name
        b'{"a": "sk-learn-is-a-python-library-for-ml", "b": "ghp_short"}',
        b'{"credentials": {"private": ["abc", "def"]}, "max_tokens": 5}',
        b"",
    ]
    quiet = 0
    for body in bodies:
        quiet += not gated.anything(body)
        assert gated.body(body, JSON) == ungated.body(body, JSON), body
        assert gated.request("/v1/x", JSON, body) == ungated.request("/v1/x", JSON, body), body
    assert 3 <= quiet < len(bodies)  # both ways taken: some read once, some searched further
