"""`forkpoint import` over random and garbled files: a clear one-line error and exit code, or
an imported run; never a traceback (the command runs in process with exceptions not caught,
so one fails the test with its traceback)."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forkpoint.cassettes.formats import har, jsonl, text
from forkpoint.models import Chunk, Exchange, Origin, Run
from tests.builders import llm, tool
from tests.runner import invoke

RUN = Run(id="fuzzed", name="fuzzed run")
EXCHANGES: list[Exchange] = [
    llm(0, run_id="fuzzed", usage=None, text="hello", started_at=1_700_000_000.0),
    tool(1, run_id="fuzzed", response_body=gzip.compress(b'{"ok": true}'),
         response_headers=(("content-encoding", "gzip"),)),
    llm(2, run_id="fuzzed", response_headers=(("content-type", "text/event-stream"),),
        response_body=b"data: {}\n\ndata: [DONE]\n\n", complete=False, error="cut",
        chunks=[Chunk(1.0, b"data: {}\n\n"), Chunk(2.0, b"data: [DONE]\n\n")],
        origin=Origin.REPLAYED),
]  # fmt: skip
VALID = {
    "yaml": text.dumps(RUN, EXCHANGES),
    "jsonl": jsonl.dumps(RUN, EXCHANGES),
    "har": har.dumps(RUN, EXCHANGES),
}
EXTENSIONS = {"yaml": ".yaml", "jsonl": ".jsonl", "har": ".har"}


def _values() -> st.SearchStrategy[object]:
    scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats() | st.text(max_size=20)
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=10), inner, max_size=4),
        max_leaves=12,
    )


@st.composite
def garbled(draw: st.DrawFn, fmt: str) -> bytes:
    """A valid file of `fmt` with some damage: cut, bytes flipped, a line dropped or doubled,
    or (JSON forms) a value replaced by a random one; else random bytes."""
    data = VALID[fmt].encode()
    how = draw(st.sampled_from(["cut", "flip", "lines", "value", "random", "junk-line"]))
    if how == "cut":
        return data[: draw(st.integers(0, len(data)))]
    if how == "flip":
        out = bytearray(data)
        for _ in range(draw(st.integers(1, 8))):
            out[draw(st.integers(0, len(out) - 1))] = draw(st.integers(0, 255))
        return bytes(out)
    if how == "lines":
        lines = data.split(b"\n")
        index = draw(st.integers(0, len(lines) - 1))
        if draw(st.booleans()):
            del lines[index]
        else:
            lines.insert(index, lines[index])
        return b"\n".join(lines)
    if how == "junk-line":
        lines = data.split(b"\n")
        lines.insert(draw(st.integers(0, len(lines))), draw(st.binary(max_size=40)))
        return b"\n".join(lines)
    if how == "value" and fmt != "yaml":
        lines = [data] if fmt == "har" else [line for line in data.splitlines() if line.strip()]
        documents = [orjson.loads(line) for line in lines]
        target = draw(st.sampled_from(documents))
        path = []
        node = target
        while isinstance(node, dict | list) and node and draw(st.integers(0, 3)):
            key = draw(st.sampled_from(list(node) if isinstance(node, dict) else range(len(node))))
            path.append(key)
            node = node[key]
        if path:
            parent = target
            for key in path[:-1]:
                parent = parent[key]
            parent[path[-1]] = draw(_values())
        return b"\n".join(orjson.dumps(d) for d in documents) + b"\n"
    return draw(st.binary(max_size=300))


@pytest.mark.parametrize("fmt", sorted(VALID))
def test_import_of_a_garbled_file_is_a_clear_error_or_a_run(fmt, tmp_path):
    cassette = tmp_path / "into.db"
    seen = {"examples": 0, "imported": 0, "refused": 0}

    @settings(
        max_examples=int(os.environ.get("FORKPOINT_FUZZ_EXAMPLES", "80")), deadline=None, database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )  # fmt: skip
    @given(content=garbled(fmt))
    def check(content: bytes) -> None:
        seen["examples"] += 1
        path = Path(tmp_path / f"file{EXTENSIONS[fmt]}")
        path.write_bytes(content)
        done = invoke("import", str(path), cassette=cassette)
        assert "Traceback" not in done.output
        if done.exit_code == 0:
            seen["imported"] += 1
        else:
            seen["refused"] += 1
            assert done.exit_code in (1, 2), done.output
            lines = [line for line in done.output.splitlines() if line.strip()]
            assert len(lines) == 1 and lines[0].startswith("forkpoint: "), done.output

    check()
    assert invoke("import", str(_valid(tmp_path, fmt)), cassette=cassette).exit_code == 0
    print(f"import fuzz ({fmt}): {seen}")


def _valid(tmp_path: Path, fmt: str) -> Path:
    path = tmp_path / f"valid{EXTENSIONS[fmt]}"
    path.write_text(VALID[fmt])
    return path
