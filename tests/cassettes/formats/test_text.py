"""Text cassettes: what forkpoint writes reads back the same, vcrpy plays it in-process, what
vcrpy records replays through the proxy, and a broken file says where it is broken."""

from __future__ import annotations

import gzip
import json
import urllib.request
from pathlib import Path

import orjson
import pytest
import vcr
import yaml

from forkpoint import api
from forkpoint.cassettes.formats import text
from forkpoint.engine.encoding import header
from forkpoint.errors import CassetteError, SchemaVersionError
from forkpoint.models import Chunk, Origin, Run, RunStatus
from forkpoint.testing.upstream import ScriptedUpstream
from tests.builders import exchange

QUESTIONS = [
    ("plain, and long enough for its request to be shown indented", False),
    ("stream me", True),
]


def post(url: str, body: dict, key: str = "sk-text-secret") -> bytes:  # type: ignore[type-arg]
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={
            "Content-Type": "application/json",
            "Authorization": f"Bearer {key}",
            "Accept-Encoding": "gzip",
        },
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        data = response.read()
        return gzip.decompress(data) if response.headers["Content-Encoding"] == "gzip" else data


def chat(question: str, stream: bool) -> dict:  # type: ignore[type-arg]
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": question}]}
    return {**body, "stream": True} if stream else body


def same_response(a: bytes, b: bytes, stream: bool) -> bool:
    """Streams byte for byte; JSON by value (text cassettes pretty-print it)."""
    return a == b if stream else json.loads(a) == json.loads(b)


@pytest.fixture
def recorded(start_upstream, start_proxy, store):  # type: ignore[no-untyped-def]
    """A run recorded through the proxy with a plain HTTP client: (run id, bodies, upstream)."""
    upstream = start_upstream(ScriptedUpstream(chunk_delay=0.002, compress=True))
    proxy = start_proxy(upstream.url)
    run = proxy.record(name="text-run").run
    seen = [post(f"{proxy.proxy.url}/v1/chat/completions", chat(q, s)) for q, s in QUESTIONS]
    proxy.close()
    return run.id, seen, upstream


def test_a_run_reads_back_as_it_was_written(recorded, store):
    run_id, _, _ = recorded
    exchanges = store.exchanges(run_id)
    content = text.dumps(store.get_run(run_id), exchanges)
    run, loaded = text.loads(content)
    assert (run.id, run.name, run.status) == (run_id, "text-run", RunStatus.FINISHED)
    assert len(loaded) == len(exchanges) == 2
    for before, after in zip(exchanges, loaded, strict=True):
        assert (after.method, after.route, after.status, after.upstream) == (
            before.method, before.route, before.status, before.upstream,
        )  # fmt: skip
        assert after.fingerprint == before.fingerprint and after.summary == before.summary
        assert (after.complete, after.origin, after.started_at) == (
            True,
            Origin.LIVE,
            before.started_at,
        )
    plain, stream = loaded
    # Every byte as it crossed the wire: the gzip body and its headers too (found by a user:
    # bodies came back pretty-printed, so an agent passing raw tool output diverged).
    assert header(exchanges[0].response_headers, "content-encoding") == "gzip"
    assert plain.response_body == exchanges[0].response_body
    assert plain.response_headers == exchanges[0].response_headers
    assert [e.request_body for e in loaded] == [e.request_body for e in exchanges]
    assert stream.response_body == exchanges[1].response_body
    assert [(c.offset_ms, c.data) for c in stream.chunks or []] == [
        (round(c.offset_ms, 3), c.data) for c in exchanges[1].chunks or []
    ]
    assert "sk-text-secret" not in content
    assert '\n        "model": "gpt-4o",\n' in content and "data: [DONE]" in content


def test_vcrpy_plays_an_exported_run_in_process(recorded, cassette, tmp_path):
    run_id, seen, upstream = recorded
    path = tmp_path / "exported.yaml"
    path.write_text(api.export_run(run_id, fmt="vcr", options=api.Options(cassette=cassette)))
    upstream.stop()  # vcrpy must answer every request itself
    with vcr.use_cassette(str(path), record_mode="none"):
        played = [post(f"{upstream.url}/v1/chat/completions", chat(q, s)) for q, s in QUESTIONS]
    for (_, stream), live, again in zip(QUESTIONS, seen, played, strict=True):
        assert same_response(live, again, stream)


def test_a_vcrpy_recording_imports_and_replays_through_the_proxy(
    start_upstream, start_proxy, store, cassette, tmp_path
):
    upstream = start_upstream(ScriptedUpstream())
    path = tmp_path / "vcrpy.yaml"
    with vcr.use_cassette(str(path), record_mode="once"):
        seen = [
            post(f"{upstream.url}/v1/chat/completions", chat(q, s), key="sk-vcr-secret")
            for q, s in QUESTIONS
        ]
    assert "sk-vcr-secret" in path.read_text()  # vcrpy keeps credentials unless told not to
    upstream.stop()

    run, steps = _imported(api.import_run(path, options=api.Options(cassette=cassette)))
    assert steps == 2 and run.labels["imported_from"] == "vcrpy.yaml"
    assert b"sk-vcr-secret" not in b"".join(p.read_bytes() for p in tmp_path.glob("cassette.db*"))
    imported = store.exchanges(run.id)
    assert imported[0].route == "/v1/chat/completions" and imported[0].summary.model == "gpt-4o"
    assert imported[1].chunks is not None and len(imported[1].chunks) >= 4  # cut into events

    proxy = start_proxy(None)
    proxy.replay(run.id)
    played = [post(f"{proxy.proxy.url}/v1/chat/completions", chat(q, s)) for q, s in QUESTIONS]
    for (_, stream), live, again in zip(QUESTIONS, seen, played, strict=True):
        assert live == again if stream else json.loads(live) == json.loads(again)


def test_binary_bodies_cut_streams_and_refused_requests_survive():
    exchanges = [
        exchange(
            response_headers=(("content-type", "image/png"),), response_body=b"\x89PNG\xff\x00"
        ),
        exchange(
            step=1,
            response_headers=(("content-type", "text/event-stream"),),
            response_body=b"data: 1\n\ndata: 2",
            chunks=[Chunk(1.5, b"data: 1\n\n"), Chunk(9.25, b"data: 2")],
            complete=False,
            error="upstream cut the response",
        ),
        exchange(step=2, status=400, origin=Origin.DIVERGED, error="forkpoint divergence: …"),
    ]
    _, loaded = text.loads(text.dumps(Run(id="r"), exchanges))
    assert loaded[0].response_body == b"\x89PNG\xff\x00"
    assert loaded[1].chunks == exchanges[1].chunks and not loaded[1].complete
    assert loaded[1].error == "upstream cut the response"
    assert (loaded[2].origin, loaded[2].upstream, loaded[2].status) == (Origin.DIVERGED, None, 400)


VCRPY_FILE = """\
interactions:
- request:
    body: '{"model": "claude-haiku-4-5", "max_tokens": 10, "messages": []}'
    headers:
      x-api-key: [sk-ant-real]
    method: POST
    uri: https://api.anthropic.com/v1/messages?key=abc
  response:
    body: {string: '{"type": "message", "model": "claude-haiku-4-5", "content": []}'}
    headers:
      Content-Length: ['3']
    status: {code: 200, message: OK}
version: 1
"""


def test_foreign_files_get_gateway_routes_and_lose_their_credentials():
    run, [loaded] = text.loads(
        VCRPY_FILE, source="tests/x.yaml", routes={"anthropic": "https://api.anthropic.com"}
    )
    assert run.name == "x" and run.status is RunStatus.FINISHED
    assert loaded.route == "/anthropic/v1/messages?key=%5Bredacted%5D"
    assert loaded.request_headers == (("x-api-key", "[redacted]"),)
    assert loaded.upstream == "https://api.anthropic.com/v1/messages?key=%5Bredacted%5D"
    assert header(loaded.response_headers, "content-length") == str(len(loaded.response_body))
    assert loaded.summary is not None and loaded.summary.model == "claude-haiku-4-5"


@pytest.mark.parametrize(
    "content, line, message",
    [
        ("interactions:\n- request: {method: POST\n  response: oops\n", 3, "not valid YAML"),
        (
            "forkpoint:\n  format_version: 1\ninteractions:\n- request:\n    method: POST\n",
            4,
            "missing `response`",
        ),
        (
            VCRPY_FILE.replace("status: {code: 200", "status: {code: two"),
            12,
            "`code` should be int, not str",
        ),
        ("just a string\n", 1, "not a cassette: it has no `interactions` list"),
        ("interactions: []\nversion: 2\n", 2, "vcrpy cassette format 2"),
    ],
)
def test_a_broken_file_is_an_error_naming_file_and_line(tmp_path, content, line, message):
    path = tmp_path / "broken.yaml"
    path.write_text(content)
    with pytest.raises(CassetteError) as caught:
        text.read(path)
    assert str(caught.value).startswith(f"{path}, line {line}: ")
    assert message in str(caught.value)


def test_a_file_from_a_newer_forkpoint_says_to_upgrade(tmp_path):
    path = tmp_path / "future.yaml"
    path.write_text(
        "# a comment\nforkpoint:\n  run: {id: R}\n  format_version: 2\ninteractions: []\nversion: 1\n"
    )
    with pytest.raises(SchemaVersionError) as caught:
        text.read(path)
    assert str(caught.value).startswith(f"{path}, line 4: written by a newer forkpoint")
    assert "upgrade forkpoint" in str(caught.value) and caught.value.found == 2


def test_an_edited_stream_whose_sizes_no_longer_add_up_says_what_to_do(recorded, store):
    run_id, _, _ = recorded
    content = text.dumps(store.get_run(run_id), store.exchanges(run_id))
    edited = content.replace('"content":"stream "', '"content":"STREAM! "')
    assert edited != content
    with pytest.raises(CassetteError, match=r"chunk sizes add up to \d+ bytes but its body has"):
        text.loads(edited, source="t.yaml")
    without_chunks = "\n".join(
        line
        for line in edited.splitlines()
        if not line.startswith("    - [") and line != "    chunks:"
    )
    _, [_, stream] = text.loads(without_chunks)
    assert b"STREAM! " in stream.response_body and len(stream.chunks or []) >= 4


def test_write_leaves_no_temporary_file_and_creates_folders(tmp_path):
    path = tmp_path / "a" / "b" / "c.yaml"
    text.write(path, Run(id="r"), [exchange()])
    assert [p.name for p in path.parent.iterdir()] == ["c.yaml"]
    assert orjson.loads(text.read(path)[1][0].request_body) == {"model": "gpt-4o"}
    with pytest.raises(CassetteError, match="no cassette at"):
        text.read(Path(tmp_path / "absent.yaml"))


def _imported(imported: api.Imported) -> tuple[Run, int]:
    return imported.run, imported.steps


@pytest.mark.parametrize(
    "body",
    [
        b'{"order":"A1","items":[{"sku":"x","qty":2},{"sku":"y","qty":1}],"note":"caf\xc3\xa9 au lait, s\'il vous pla\xc3\xaet"}',  # httpx, the SDKs
        b'{"order": "A1", "total": 89.9, "ok": true, "note": "caf\\u00e9"}',  # json.dumps
        b'{"order" : "A1",\n  "odd":   [1,2]}',  # a server's own spacing: shown as it is
        b'{"dup": 1, "dup": 2}',  # no serializer gives it back: shown as it is
        b"\x00\x01 not text",
    ],
)
def test_every_body_reads_back_byte_for_byte_and_json_is_shown_indented_where_safe(body):
    tool_call = exchange(route="/tools/orders", request_body=body, response_body=body,
                         request_headers=(), response_headers=())  # fmt: skip
    content = text.dumps(Run(id="r"), [tool_call])
    _, [loaded] = text.loads(content)
    assert (loaded.request_body, loaded.response_body) == (body, body)
    if body.startswith(b'{"order":"A1"'):  # the request indented for the reviewer
        assert '\n        "order": "A1",\n' in content


def test_a_hand_edited_indented_body_is_written_back_in_its_form():
    context = "x" * text.ONE_LINE
    tool_call = exchange(request_body=b'{"question":"no","context":"%s"}' % context.encode(),
                         request_headers=())  # fmt: skip
    content = text.dumps(Run(id="r"), [tool_call]).replace('"question": "no"', '"question": "yes"')
    _, [loaded] = text.loads(content)
    assert loaded.request_body == b'{"question":"yes","context":"%s"}' % context.encode()
    broken = content.replace('"question": "yes"', '"question": ')
    with pytest.raises(CassetteError, match="must be JSON"):
        text.loads(broken)


def test_a_short_body_is_written_as_it_is_and_a_route_the_uri_gives_is_left_out():
    """A one-line request is as readable as it gets: indenting it, or writing a route its uri
    already says, only makes a test cassette larger than vcrpy's (issue 16.5)."""
    body = b'{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}'
    plain = exchange(request_body=body, request_headers=(), upstream="http://up/v1/chat/completions",
                     route="/v1/chat/completions")  # fmt: skip
    named = exchange(step=1, request_body=body, request_headers=(),
                     upstream="http://up/v1/messages", route="/anthropic/v1/messages")  # fmt: skip
    content = text.dumps(Run(id="r"), [plain, named])
    assert body.decode() in content and "request_json" not in content
    assert "route: /v1/chat/completions" not in content
    assert "route: /anthropic/v1/messages" in content
    _, loaded = text.loads(content, routes={"v1": "http://up/v1"})
    assert [e.route for e in loaded] == ["/v1/chat/completions", "/anthropic/v1/messages"]
    assert [e.request_body for e in loaded] == [body, body]


def test_a_note_on_how_an_answer_was_chosen_is_kept_by_every_format():
    from forkpoint.cassettes.formats import har, jsonl

    noted = exchange(note="similar: set aside metadata.user_id")
    for fmt in (text, jsonl, har):
        _, [loaded] = fmt.loads(fmt.dumps(Run(id="r"), [noted]))
        assert loaded.note == noted.note, fmt.__name__


def test_a_yaml_alias_bomb_is_refused_before_it_expands(tmp_path):
    """627 bytes that expand to 9^9 strings: aliases are refused, with the file and line."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for index, name in enumerate("bcdefghi"):
        previous = "abcdefghi"[index]
        lines.append(f"{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]")
    lines += [
        "interactions:",
        "- request: {method: GET, uri: 'http://x/', body: null, headers: {x-bomb: *i}}",
        "  response: {status: {code: 200, message: OK}, headers: {}, body: {string: ''}}",
    ]
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(CassetteError, match=r"bomb.yaml, line 2: .*alias"):
        text.read(path)


@pytest.mark.parametrize(
    "document, line",
    [
        ("a: &x 1\nb: *x\n", 2),
        ("a: &x {}\nb: {c: *x}\n", 2),  # an empty one too
        ("a: &x [*x]\n", 1),
        ("k: &x 1\n*x : 2\n", 2),
        ("a: &x 1\nb: [*x, {c: *x}]\nd: [\n", 2),  # an alias ahead of broken YAML, as before
        ("a: [\nb: *x\n", 2),  # an undefined alias too
    ],
)
def test_an_alias_is_refused_naming_its_line_and_anchor(document, line):
    with pytest.raises(CassetteError) as caught:
        text.loads(document, source="t.yaml")
    assert str(caught.value) == (
        f"t.yaml, line {line}: a YAML alias (*x) is not read in a cassette (aliases can expand "
        "without bound); write the value out"
    )


def test_a_cassette_is_parsed_once_though_its_text_holds_a_star(monkeypatch):
    """`*/*` in a header, `**bold**` in an answer: no second pass looks for aliases."""
    monkeypatch.setattr(yaml, "parse", lambda *args, **kwargs: pytest.fail("parsed twice"))
    _, [loaded] = text.loads(VCRPY_FILE.replace("x-api-key: [sk-ant-real]", "accept: ['*/*']"))
    assert loaded.request_headers == (("accept", "*/*"),)
