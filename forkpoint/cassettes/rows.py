"""Rows of the SQL stores (SQLite and PostgreSQL) to and from the models.

Both stores keep the same columns in the same order, so one set of conversions serves both. A
row that does not read (a status this forkpoint does not know, a JSON column that is not JSON)
is a damaged cassette: the error names the run and step, never a bare traceback.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import orjson

from forkpoint.cassettes import manifests
from forkpoint.cassettes.blobs import Codec, compress, content_hash, decompress, zstd
from forkpoint.cassettes.headers import REQUEST, RESPONSE, HeaderSets
from forkpoint.cassettes.manifests import Fetch, Key, Manifest
from forkpoint.errors import CassetteError
from forkpoint.models import (
    Blob,
    Chunk,
    Exchange,
    Headers,
    Kind,
    Mode,
    Origin,
    Piece,
    Run,
    RunStatus,
    Snapshot,
    Summary,
    ToolCall,
    Usage,
)

RUN_COLUMNS = (
    "id", "name", "labels", "status", "mode", "parent_id", "fork_step", "change",
    "created_at", "ended_at", "error", "owner",
)  # fmt: skip
EXCHANGE_COLUMNS = (
    "run_id", "step", "method", "route", "upstream", "request_headers", "request_body",
    "fingerprint", "status", "response_headers", "response_body", "streamed", "complete",
    "error", "origin", "started_at", "ttfb_ms", "duration_ms", "kind", "dialect", "model",
    "input_tokens", "output_tokens", "cached_tokens", "reasoning_tokens", "tool_calls",
    "finish_reason", "text", "note", "response_pieces", "cache_write_tokens", "audio_tokens",
    "audio_seconds", "request_pieces", "asked_body", "text_zstd",
)  # fmt: skip
# Columns a store of an older schema lacks, with the version that added each: read as NULL.
_USAGE_MORE = {"sqlite": 6, "postgres": 5}
ADDED_IN = {
    "note": {"sqlite": 3, "postgres": 2},
    "response_pieces": {"sqlite": 4, "postgres": 3},
    "cache_write_tokens": _USAGE_MORE,
    "audio_tokens": _USAGE_MORE,
    "audio_seconds": _USAGE_MORE,
    "request_pieces": {"sqlite": 7, "postgres": 6},
    "asked_body": {"sqlite": 9, "postgres": 8},
    # With it, header columns that refer to an earlier step's (`cassettes.headers`).
    "text_zstd": {"sqlite": 10, "postgres": 9},
}
# The run columns a store of an older schema lacks, alike.
RUN_ADDED_IN = {"owner": {"sqlite": 8, "postgres": 7}}
SNAPSHOT_COLUMNS = (
    "run_id", "step", "adapter", "content_type", "body", "size", "error", "taken_at",
    "duration_ms",
)  # fmt: skip
# An experiment's branches, and those that failed: no run, or an error (`Branch.ok`).
EXPERIMENT_COUNTS = (
    "SELECT count(*), sum(CASE WHEN branch_id IS NULL OR error IS NOT NULL THEN 1 ELSE 0 END) "
    "FROM experiment_runs WHERE experiment=%s"
)
_X = {name: index for index, name in enumerate(EXCHANGE_COLUMNS)}
_DAMAGE = (ValueError, TypeError, KeyError, IndexError, orjson.JSONDecodeError, zstd.ZstdError)


def exchange_select(store: str, version: int) -> str:
    """The exchange columns to select from a store of `version`: a column added later is
    read as NULL (a reader never migrates)."""
    return ", ".join(
        f"NULL AS {c}" if ADDED_IN.get(c, {}).get(store, 0) > version else c
        for c in EXCHANGE_COLUMNS
    )


def run_select(store: str, version: int) -> str:
    """The run columns to select from a store of `version`, as `exchange_select` does."""
    return ", ".join(
        f"NULL AS {c}" if RUN_ADDED_IN.get(c, {}).get(store, 0) > version else c
        for c in RUN_COLUMNS
    )


def response_key(store: str, version: int) -> str:
    """The SQL expression `response_keys` reads: the response's manifest, and its pieces'."""
    if ADDED_IN["response_pieces"][store] > version:
        return "response_body"
    return "response_body || coalesce(response_pieces, '')"


def damaged(where: str, what: str, error: object) -> CassetteError:
    return CassetteError(f"{where} is damaged: {what} ({error})")


def read[T](where: str, what: str, convert: Callable[[], T]) -> T:
    """`convert()`, a failure reported as damage to `where` (a run, a step)."""
    try:
        return convert()
    except _DAMAGE as error:
        raise damaged(where, what, error) from None


def readable[R, T](
    rows: Sequence[R], convert: Callable[[R], T], damaged: list[CassetteError] | None
) -> list[T]:
    """Each row converted; a damaged one raises, or with `damaged` is left out, said there."""
    if damaged is None:
        return [convert(row) for row in rows]
    found = []
    for row in rows:
        try:
            found.append(convert(row))
        except CassetteError as error:
            damaged.append(error)
    return found


def dump_json(value: object) -> str:
    return orjson.dumps(value).decode()


def like_prefix(ref: str) -> str:
    """A LIKE pattern (escape character `\\`) for ids starting with `ref`, in any case."""
    escaped = ref.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "%"


def run_values(run: Run) -> tuple[Any, ...]:
    return (
        run.id, run.name, dump_json(run.labels), run.status, run.mode, run.parent_id,
        run.fork_step, None if run.change is None else dump_json(run.change), run.created_at,
        run.ended_at, run.error, run.owner,
    )  # fmt: skip


def run_from_row(row: Sequence[Any]) -> Run:
    (id_, name, labels, status, mode, parent, fork_step, change, created, ended, error,
     owner) = row  # fmt: skip
    where = f"run {id_}"
    return Run(
        id=id_,
        name=name,
        labels=read(where, "its labels", lambda: dict(orjson.loads(labels or "{}"))),
        status=read(where, "its status", lambda: RunStatus(status)),
        mode=read(where, "its mode", lambda: Mode(mode)),
        parent_id=parent,
        fork_step=fork_step,
        change=read(where, "its change", lambda: None if change is None else orjson.loads(change)),
        created_at=created,
        ended_at=ended,
        error=error,
        owner=owner,
    )


def exchange_values(
    ex: Exchange,
    packer: manifests.Packer,
    request_body: Manifest,
    response_body: Manifest,
    asked_body: Manifest | None = None,
) -> tuple[Any, ...]:
    """The exchange's columns in EXCHANGE_COLUMNS order; the bodies are their manifests (for
    the store to name: `named`), the headers packed (`cassettes.headers`). A compact packer's
    (the SQLite cassette's from schema 12) keep a fingerprint of 64 hex digits as its 32
    bytes, and no tool calls as NULL."""
    summary = ex.summary or Summary(kind=Kind.OTHER, dialect="generic")
    usage = summary.usage
    heads = packer.headers
    text, text_zstd = pack_text(summary.text)
    calls: str | None = dump_json([[c.name, c.arguments, c.id] for c in summary.tool_calls])
    fingerprint: str | bytes = ex.fingerprint
    if packer.compact:
        calls = calls if summary.tool_calls else None
        fingerprint = pack_fingerprint(ex.fingerprint)
    return (
        ex.run_id, ex.step, ex.method, ex.route, ex.upstream,
        heads.pack(ex.run_id, ex.step, REQUEST, ex.request_headers), request_body,
        fingerprint, ex.status, heads.pack(ex.run_id, ex.step, RESPONSE, ex.response_headers),
        response_body, int(ex.streamed), int(ex.complete),
        ex.error, ex.origin, ex.started_at, ex.ttfb_ms, ex.duration_ms,
        summary.kind, summary.dialect, summary.model,
        usage and usage.input, usage and usage.output,
        usage and usage.cached, usage and usage.reasoning,
        calls, summary.finish_reason, text, ex.note, dump_pieces(ex.pieces),
        usage and usage.cache_write, usage and usage.audio, usage and usage.audio_seconds,
        dump_pieces(ex.request_pieces), asked_body, text_zstd,
    )  # fmt: skip


def named(values: tuple[Any, ...], key: Callable[[str], Key] | None = None) -> tuple[Any, ...]:
    """A row's values with each manifest dumped, its blobs named by `key(hash)` (by their
    hashes without one)."""
    return tuple([v.dump(key) if isinstance(v, Manifest) else v for v in values])


_HEX = frozenset("0123456789abcdef")


def pack_fingerprint(fingerprint: str) -> str | bytes:
    """A fingerprint as a compact row keeps it: 64 lowercase hex digits as their 32 bytes,
    anything else as it is (`unpack_fingerprint` gives back the same text)."""
    if len(fingerprint) == 64 and _HEX.issuperset(fingerprint):
        return bytes.fromhex(fingerprint)
    return fingerprint


def unpack_fingerprint(stored: str | bytes) -> str:
    return stored.hex() if isinstance(stored, bytes) else stored


def pack_text(text: str | None) -> tuple[str | None, bytes | None]:
    """A summary's text as its two columns: compressed where that saves space (an answer's
    text is also in its body, but reading it from there needs the body), else as it is."""
    if text is None:
        return None, None
    codec, data = compress(text.encode())
    return (None, data) if codec == Codec.ZSTD else (text, None)


def unpack_text(text: str | None, packed: bytes | None) -> str | None:
    return text if packed is None else decompress(Codec.ZSTD, bytes(packed)).decode()


def dump_pieces(pieces: tuple[Piece, ...]) -> str | None:
    """A body's pieces as their column holds them: [[sha256, size, offset_ms], ...], or NULL."""
    return dump_json([[p.digest, p.size, p.offset_ms] for p in pieces]) if pieces else None


def load_pieces(text: str | None) -> tuple[Piece, ...]:
    listed = orjson.loads(text or "[]")
    pieces = tuple(Piece(str(d), int(size), float(at)) for d, size, at in listed)
    if any(len(p.digest) != 64 or p.size < 0 for p in pieces):
        raise ValueError("not a list of pieces")
    return pieces


def piece_rows(blobs: Iterable[Blob], stored: Callable[[str], bool]) -> list[manifests.BlobRow]:
    """The blob rows that store pieces the store lacks, compressed before the transaction.
    A piece is one blob, named by the sha256 the tee gave it, compressed on its own."""
    rows: dict[str, manifests.BlobRow] = {}
    for blob in blobs:
        if blob.digest in rows or stored(blob.digest):
            continue
        codec, data = compress(blob.data)
        rows[blob.digest] = (blob.digest, len(blob.data), codec, data, ())
    return list(rows.values())


def piece_bytes(piece: Piece, read: Callable[[], bytes | None], label: str) -> bytes:
    """A piece's bytes as `read()` gives them from its blob (None: there is none), checked: a
    replay serves them as the recording had them, or says the cassette is damaged."""
    try:
        data = read()
    except (ValueError, KeyError, zstd.ZstdError) as error:
        raise CassetteError(f"{label}: the piece {piece.digest} is damaged ({error})") from None
    if data is None:
        raise CassetteError(f"{label} lacks the piece {piece.digest} of a body")
    if len(data) != piece.size or content_hash(data) != piece.digest:
        raise CassetteError(f"{label}: the piece {piece.digest} is damaged (not its bytes)")
    return data


ExchangeRow = tuple[tuple[Any, ...], list[tuple[Any, ...]]]  # its columns, its chunks' rows


def exchange_rows(
    exchanges: Iterable[Exchange], packer: manifests.Packer, stored: Callable[[str], bool]
) -> tuple[dict[str, manifests.BlobRow], list[ExchangeRow]]:
    """The rows that store `exchanges`, and the blobs their bodies add to those `stored`: cut,
    hashed and compressed before the write transaction, which only inserts."""
    new: dict[str, manifests.BlobRow] = {}
    rows = [
        (
            exchange_values(
                ex,
                packer,
                packer.pack_request(ex.run_id, ex.step, ex.request_body, new, stored),
                packer.pack_response(ex.response_body, new, stored, ex.run_id),
                None if ex.asked_body is None else packer.pack(ex.asked_body, None, new, stored),
            ),
            chunk_rows(ex),
        )
        for ex in exchanges
    ]
    return new, rows


Heads = tuple[Headers, Headers] | CassetteError  # a row's headers, or why they do not read


def exchange_from_row(
    row: Sequence[Any],
    request_body: bytes,
    response_body: bytes,
    heads: Heads,
    asked_body: bytes | None = None,
) -> Exchange:
    """An exchange from its columns (EXCHANGE_COLUMNS order), its loaded bodies and headers
    (`run_headers`); a stream's `chunks` is an empty list, to be cut by `cut_chunks`."""
    x = _X
    where = f"run {row[x['run_id']]} step {row[x['step']]}"
    if isinstance(heads, CassetteError):
        raise heads
    usage = None
    if row[x["input_tokens"]] is not None:
        usage = Usage(
            row[x["input_tokens"]], row[x["output_tokens"]] or 0,
            row[x["cached_tokens"]] or 0, row[x["reasoning_tokens"]] or 0,
            row[x["cache_write_tokens"]] or 0, row[x["audio_tokens"]] or 0,
            row[x["audio_seconds"]] or 0.0,
        )  # fmt: skip
    summary = Summary(
        kind=read(where, "its kind", lambda: Kind(row[x["kind"]])),
        dialect=row[x["dialect"]],
        model=row[x["model"]],
        usage=usage,
        tool_calls=read(where, "its tool calls", lambda: _tool_calls(row[x["tool_calls"]])),
        finish_reason=row[x["finish_reason"]],
        text=read(where, "its text", lambda: unpack_text(row[x["text"]], row[x["text_zstd"]])),
    )
    method = row[x["method"]]
    if not isinstance(method, str):
        raise damaged(where, "its method", f"{method!r}")
    return Exchange(
        run_id=row[x["run_id"]],
        step=row[x["step"]],
        method=method,
        route=row[x["route"]],
        request_headers=heads[0],
        request_body=request_body,
        fingerprint=unpack_fingerprint(row[x["fingerprint"]]),
        status=row[x["status"]],
        response_headers=heads[1],
        response_body=response_body,
        chunks=[] if row[x["streamed"]] else None,
        complete=bool(row[x["complete"]]),
        error=row[x["error"]],
        origin=read(where, "its origin", lambda: Origin(row[x["origin"]])),
        upstream=row[x["upstream"]],
        started_at=row[x["started_at"]],
        ttfb_ms=row[x["ttfb_ms"]],
        duration_ms=row[x["duration_ms"]],
        summary=summary,
        note=row[x["note"]],
        pieces=read(where, "its pieces", lambda: load_pieces(row[x["response_pieces"]])),
        request_pieces=read(
            where, "its request's pieces", lambda: load_pieces(row[x["request_pieces"]])
        ),
        asked_body=asked_body,
    )  # fmt: skip


def run_headers(rows: Sequence[Sequence[Any]]) -> list[Heads]:
    """Each row's headers, read in step order before anything else of it, so a row damaged
    elsewhere still gives its headers to the later steps that refer to them."""
    sets = HeaderSets()
    return [_row_headers(sets, row) for row in rows]


def _row_headers(sets: HeaderSets, row: Sequence[Any]) -> Heads:
    step, where = row[_X["step"]], _where(row)
    try:
        request = read(where, "its request headers",
                       lambda: sets.read(REQUEST, step, row[_X["request_headers"]]))
        response = read(where, "its response headers",
                        lambda: sets.read(RESPONSE, step, row[_X["response_headers"]]))
    except CassetteError as error:
        return error
    return request, response  # fmt: skip


def _tool_calls(text: str | None) -> tuple[ToolCall, ...]:
    return tuple(ToolCall(n, a, i) for n, a, i in orjson.loads(text or "[]"))


def chunk_rows(ex: Exchange) -> list[tuple[Any, ...]]:
    """(run_id, step, seq, offset_ms, size, end) per chunk, then an end marker row when the
    stream ended cleanly, so a cut stream is visible in SQL."""
    if ex.chunks is None:
        return []
    rows = [
        (ex.run_id, ex.step, seq, c.offset_ms, len(c.data), 0) for seq, c in enumerate(ex.chunks)
    ]
    if ex.complete:
        end = ex.duration_ms if ex.duration_ms is not None else 0.0
        rows.append((ex.run_id, ex.step, len(ex.chunks), end, 0, 1))
    return rows


def cut_chunks(body: bytes, sizes: list[tuple[float, int]]) -> list[Chunk]:
    chunks, position = [], 0
    for offset_ms, size in sizes:
        chunks.append(Chunk(offset_ms, body[position : position + size]))
        position += size
    return chunks


def snapshot_values(snapshot: Snapshot, body: Manifest) -> tuple[Any, ...]:
    return (
        snapshot.run_id, snapshot.step, snapshot.adapter, snapshot.content_type, body,
        len(snapshot.data), snapshot.error, snapshot.taken_at, snapshot.duration_ms,
    )  # fmt: skip


def snapshot_from_row(row: Sequence[Any], data: bytes) -> Snapshot:
    run_id, step, adapter, content_type, _, size, error, taken_at, duration_ms = row
    return Snapshot(run_id, step, adapter, content_type, data, error, taken_at, duration_ms, size)


def exchanges_from_rows(
    rows: Sequence[Sequence[Any]], chunk_sizes: Iterable[Sequence[Any]], fetch: Fetch, *,
    bodies: bool, damaged: list[CassetteError] | None,
) -> list[Exchange]:  # fmt: skip
    """A run's exchanges from its rows in step order, its (step, offset_ms, size) chunk rows,
    and `fetch` for the blobs their bodies name (all fetched at once, each decompressed once).
    A damaged row raises, or with `damaged` is left out and said there."""
    heads = run_headers(rows)
    if bodies:
        planned = _planned(rows, heads)
        found = manifests.fetch_in_chunks(
            manifests.wanted(h for plan in planned for h in (plan[1], plan[2], plan[3] or [])),
            fetch,
        )
        result = readable(planned, lambda plan: _with_bodies(plan, found), damaged)
    else:
        rows_heads = list(zip(rows, heads, strict=True))
        result = readable(rows_heads, lambda rh: exchange_from_row(rh[0], b"", b"", rh[1]),
                          damaged)  # fmt: skip
    by_step: dict[int, list[tuple[float, int]]] = {}
    for step, offset_ms, size in chunk_sizes:
        by_step.setdefault(step, []).append((offset_ms, size))
    for exchange in result:
        if exchange.chunks is not None:
            exchange.chunks = cut_chunks(exchange.response_body, by_step.get(exchange.step, []))
    return result


# a row, its request's, response's and asked body's blobs (None: it has none), its damage,
# its headers
_Plan = tuple[Sequence[Any], list[Key], list[Key], list[Key] | None, CassetteError | None, Heads]


def _planned(rows: Sequence[Sequence[Any]], heads: list[Heads]) -> list[_Plan]:
    """Each row with its bodies' hashes, requests resolved in step order."""
    reader = manifests.Bodies()
    planned: list[_Plan] = []
    for row, head in zip(rows, heads, strict=True):
        try:
            request = reader.request(row[_X["step"]], row[_X["request_body"]])
            response = reader.other(row[_X["response_body"]])
            manifest = row[_X["asked_body"]]
            asked = None if manifest is None else reader.other(manifest)
            planned.append((row, request, response, asked, None, head))
        except ValueError as error:
            problem = damaged(_where(row), "its body's list of blobs", error)
            planned.append((row, [], [], None, problem, head))
    return planned


def _with_bodies(plan: _Plan, found: manifests.Blobs) -> Exchange:
    row, request, response, asked, problem, heads = plan
    if problem is not None:
        raise problem
    where = _where(row)
    return exchange_from_row(
        row, _join(found, request, where), _join(found, response, where), heads,
        None if asked is None else _join(found, asked, where),
    )  # fmt: skip


def _join(found: manifests.Blobs, hashes: list[Key], where: str) -> bytes:
    try:
        return found.join(hashes)
    except KeyError as missing:
        raise damaged(where, "a body", f"blob {missing} is missing") from None
    except ValueError as error:
        raise damaged(where, "a body", error) from None


def _where(row: Sequence[Any]) -> str:
    return f"run {row[_X['run_id']]} step {row[_X['step']]}"


def snapshots_from_rows(
    rows: Sequence[Sequence[Any]], fetch: Fetch, *, data: bool
) -> list[Snapshot]:
    """Snapshots from their rows (SNAPSHOT_COLUMNS order), states loaded with `data`."""
    if not data:
        return [snapshot_from_row(row, b"") for row in rows]
    planned = []
    for row in rows:
        where = f"run {row[0]} step {row[1]} (snapshot {row[2]})"
        try:
            planned.append((row, manifests.Bodies.other(row[4]), where))
        except ValueError as error:
            raise damaged(where, "its state's list of blobs", error) from None
    found = manifests.fetch_in_chunks(manifests.wanted(h for _, h, _ in planned), fetch)
    return [snapshot_from_row(row, _join(found, hashes, where)) for row, hashes, where in planned]
