"""Moving runs between a store and files (vcrpy YAML, JSON lines, HAR), and between stores.

A production run captured by `forkpoint serve` becomes a test cassette with `dump_run`, and a
cassette that vcrpy recorded, or a HAR from a browser, becomes a run to replay with
`load_file`. `copy_runs` moves runs as they are (ids, steps, bytes, snapshots) from one store
to another: an SQLite file to PostgreSQL and back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from forkpoint.cassettes.formats import har, jsonl, text
from forkpoint.cassettes.store import Store
from forkpoint.engine.config import DEFAULT_ROUTES
from forkpoint.errors import AlreadyRecorded, CassetteError, ConfigError, RunNotFound
from forkpoint.models import Blob, Chunk, Exchange, Run, new_run_id

__all__ = ["FORMATS", "copy_runs", "dump_run", "guess_format", "joined", "load_file"]

# Exchanges written per transaction by `copy_runs`.
COPY_BATCH = 200
# The largest body written to a file (bytes): a file holds its bodies whole, so a body in
# pieces up to this is joined into it, and a larger one refused rather than cut.
FILE_BODY_LIMIT = 64 * 1024 * 1024

Dumps = Callable[[Run, Sequence[Exchange]], str]
Loads = Callable[..., tuple[Run, list[Exchange]]]
FORMATS: dict[str, tuple[Dumps, Loads]] = {
    "vcr": (text.dumps, text.loads),
    "jsonl": (jsonl.dumps, jsonl.loads),
    "har": (har.dumps, har.loads),
}


def dump_run(store: Store, ref: str, *, fmt: str) -> str:
    """RUN (id, id prefix or name) in the store, as the text of a `fmt` file."""
    dumps = _format(fmt)[0]
    run = store.find_run(ref)
    return dumps(run, joined(store, store.exchanges(run.id)))


def joined(
    store: Store, exchanges: Sequence[Exchange], limit: int = FILE_BODY_LIMIT
) -> list[Exchange]:
    """`exchanges` with their bodies whole, for a file: pieces read from `store` and joined
    into the body (a stream's as chunks at their offsets), up to `limit` bytes a body; a
    larger one stays in pieces, which the formats refuse (`interop.held_whole`)."""
    whole = []
    for exchange in exchanges:
        if exchange.pieces and exchange.body_size <= limit:
            parts = [store.piece(piece) for piece in exchange.pieces]
            chunks = exchange.chunks
            if chunks is not None:
                pairs = zip(exchange.pieces, parts, strict=True)
                chunks = [*chunks, *(Chunk(piece.offset_ms, part) for piece, part in pairs)]
            body = exchange.response_body + b"".join(parts)
            exchange = replace(exchange, response_body=body, chunks=chunks, pieces=())
        whole.append(exchange)
    return whole


def load_file(
    source: Path, *, fmt: str | None = None, routes: Mapping[str, str] | None = None
) -> tuple[Run, list[Exchange]]:
    """The run in the file at `source`, as a new run to add to a store.

    The run gets a fresh id (importing a file twice makes two runs) and forgets its parent,
    which the store may not hold; `routes` (prefix → base URL) add to `DEFAULT_ROUTES`.
    """
    try:
        content = source.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise CassetteError(f"cannot read {source}: {error}") from None
    loads = _format(fmt or guess_format(source, content))[1]
    run, exchanges = loads(content, source=str(source), routes={**DEFAULT_ROUTES, **(routes or {})})
    imported = replace(
        run,
        id=new_run_id(),
        labels={**run.labels, "imported_from": source.name},
        parent_id=None,
    )
    return imported, exchanges


def copy_runs(
    source: Store, target: Store, refs: Sequence[str] = ()
) -> Iterator[tuple[Run, int | None]]:
    """Copy the runs `refs` name (every run if none), each with the runs it was forked or
    replayed from, oldest first, as they are: same ids, steps, bytes (a body's pieces too) and
    snapshots. Yields each
    run with its step count, or None for a run the target holds already (never rewritten)."""
    chosen = [source.find_run(ref) for ref in refs] if refs else source.list_runs()
    runs: dict[str, Run] = {}
    for run in chosen:
        while run.id not in runs:
            runs[run.id] = run
            if run.parent_id is None:
                break
            run = source.get_run(run.parent_id)
    for run in sorted(runs.values(), key=lambda r: r.id):
        try:
            target.get_run(run.id)
            yield run, None
            continue
        except RunNotFound:
            pass
        try:
            target.create_run(run)
        except AlreadyRecorded:  # copied there meanwhile
            yield run, None
            continue
        exchanges = source.exchanges(run.id)
        for start in range(0, len(exchanges), COPY_BATCH):
            batch = exchanges[start : start + COPY_BATCH]
            for piece in (piece for exchange in batch for piece in exchange.pieces):
                # one at a time: a body in pieces is never held whole, here either
                target.add_pieces([Blob(piece.digest, source.piece(piece))])
            target.add_exchanges(batch)
        for snapshot in source.snapshots(run.id, data=True):
            target.add_snapshot(snapshot)
        yield run, len(exchanges)


def guess_format(path: Path, content: str) -> str:
    """The format by extension, else by the first character: `{` HAR or JSON lines, else YAML."""
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml"):
        return "vcr"
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    if suffix == ".har":
        return "har"
    first = content.lstrip()[:1]
    if first == "{":
        return "jsonl" if content.lstrip().startswith('{"forkpoint"') else "har"
    return "vcr"


def _format(fmt: str) -> tuple[Dumps, Loads]:
    try:
        return FORMATS[fmt]
    except KeyError:
        raise ConfigError(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}") from None
