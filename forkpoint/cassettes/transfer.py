"""Moving runs between a store and files (vcrpy YAML, JSON lines, HAR), and between stores.

A production run captured by `forkpoint serve` becomes a test cassette with `dump_run`, and a
cassette that vcrpy recorded, or a HAR from a browser, becomes a run to replay with
`read_file_run` then `import_file`: read an exchange at a time and written in batches, all in
one transaction, so its memory does not grow with the file and a file that fails part-way
leaves the store as it was. `copy_runs` moves runs as they are (ids, steps, bytes, snapshots,
parks and how to wake them) from one store to another: an SQLite file to PostgreSQL and back.
A file holds exchanges only: a parked run exported waits on nothing once imported.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Protocol

from forkpoint.cassettes.formats import har, jsonl, text
from forkpoint.cassettes.formats.interop import Format, NotThisFormat
from forkpoint.cassettes.store import Store
from forkpoint.engine.config import DEFAULT_ROUTES
from forkpoint.errors import AlreadyRecorded, CassetteError, ConfigError, RunNotFound
from forkpoint.models import Blob, Chunk, Exchange, Run, new_run_id

__all__ = [
    "FORMATS", "Atomic", "FileRun", "copy_runs", "dump_run", "guess_format", "import_file",
    "joined", "read_file_run",
]  # fmt: skip

# Exchanges written per transaction by `copy_runs`, and per call by `import_file`.
COPY_BATCH = 200
# The largest body written to a file (bytes): a file holds its bodies whole, so a body in
# pieces up to this is joined into it, and a larger one refused rather than cut.
FILE_BODY_LIMIT = 64 * 1024 * 1024

Dumps = Callable[[Run, Sequence[Exchange]], str]
FORMATS: dict[str, tuple[Dumps, Format]] = {
    "vcr": (text.dumps, text),
    "jsonl": (jsonl.dumps, jsonl),
    "har": (har.dumps, har),
}
_NAMES = {"vcr": "vcrpy YAML (.yaml)", "jsonl": "JSON lines (.jsonl)", "har": "HAR (.har)"}


class Atomic(Store, Protocol):
    """A store whose writes inside `atomic()` are one transaction: the SQL stores."""

    def atomic(self) -> AbstractContextManager[None]: ...


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
        if exchange.request_pieces and exchange.request_size <= limit:
            # its fingerprint reads the same off the body whole (`matching.fingerprint`)
            parts = [store.piece(piece) for piece in exchange.request_pieces]
            body = exchange.request_body + b"".join(parts)
            exchange = replace(exchange, request_body=body, request_pieces=())
        whole.append(exchange)
    return whole


@dataclass(frozen=True, slots=True)
class FileRun:
    """The run in a cassette file, read (its format and version checked) as the new run it
    becomes, its exchanges still in the file: `import_file` stores them."""

    run: Run
    source: Path
    reader: Format


def read_file_run(source: Path, *, fmt: str | None = None, name: str | None = None) -> FileRun:
    """The run in the file at `source` (format `fmt`, else by extension or content), with a
    fresh id (importing a file twice makes two runs) and without its parent, which the store
    may not hold. Its exchanges are passed over, never built."""
    chosen, why = (fmt, "as --format asked") if fmt else guess_format(source)
    reader = _format(chosen)[1]
    with _opened(source) as file:
        try:
            found = reader.read_run(file, source=str(source))
        except NotThisFormat as error:
            others = ", ".join(name for key, name in _NAMES.items() if key != chosen)
            raise CassetteError(
                f"{error}; read as {_NAMES[chosen]} {why} (forkpoint also imports {others}: "
                "give --format)"
            ) from None
    run = replace(
        found, id=new_run_id(), name=name or found.name, parent_id=None,
        labels={**found.labels, "imported_from": source.name},
    )  # fmt: skip
    return FileRun(run, source, reader)


def import_file(store: Atomic, found: FileRun, *, routes: Mapping[str, str] | None = None) -> int:
    """Add the file's run to `store`; its step count. The exchanges are read one at a time
    and written COPY_BATCH at a time in one transaction, which a bad exchange anywhere in the
    file rolls back whole. `routes` (prefix → base URL) add to `DEFAULT_ROUTES`."""
    every = {**DEFAULT_ROUTES, **(routes or {})}
    label = str(found.source)
    steps = 0
    with _opened(found.source) as file, store.atomic():
        store.create_run(found.run)
        exchanges = found.reader.read_exchanges(file, found.run.id, source=label, routes=every)
        for batch in itertools.batched(exchanges, COPY_BATCH):
            store.add_exchanges(batch)
            steps += len(batch)
    return steps


def _opened(source: Path) -> IO[bytes]:
    try:
        return source.open("rb")
    except OSError as error:
        raise CassetteError(f"cannot read {source}: {error.strerror or error}") from None


def copy_runs(
    source: Store, target: Store, refs: Sequence[str] = ()
) -> Iterator[tuple[Run, int | None]]:
    """Copy the runs `refs` name (every run if none), each with the runs it was forked or
    replayed from, oldest first, as they are: same ids, steps, bytes (bodies' pieces too),
    snapshots, parks and launches. Yields each run with its step count, or None for a run the
    target holds already (never rewritten)."""
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
            named = (piece for e in batch for piece in (*e.request_pieces, *e.pieces))
            for piece in named:
                # one at a time: a body in pieces is never held whole, here either
                target.add_pieces([Blob(piece.digest, source.piece(piece))])
            target.add_exchanges(batch)
        for snapshot in source.snapshots(run.id, data=True):
            target.add_snapshot(snapshot)
        for park in source.run_parks(run.id):  # a parked run stays answerable and wakes
            target.add_park(park)
        launch = source.launch(run.id)
        if launch is not None:
            target.set_launch(launch)
        yield run, len(exchanges)


def guess_format(path: Path) -> tuple[str, str]:
    """The format by extension, else by the file's first character: `{` HAR or JSON lines
    (which starts `{"forkpoint"`), else YAML; and why, as an error says it."""
    suffix = path.suffix.lower()
    by_extension = {
        ".yaml": "vcr",
        ".yml": "vcr",
        ".jsonl": "jsonl",
        ".ndjson": "jsonl",
        ".har": "har",
    }
    if suffix in by_extension:
        return by_extension[suffix], f"by its extension {suffix}"
    with _opened(path) as file:
        head = file.read(64).lstrip()
    if head[:1] == b"{":
        if head.startswith(b'{"forkpoint"'):
            return "jsonl", 'by its content (a first line that starts {"forkpoint")'
        return "har", "by its content (a JSON object)"
    return "vcr", "by its content (not JSON)"


def _format(fmt: str) -> tuple[Dumps, Format]:
    try:
        return FORMATS[fmt]
    except KeyError:
        raise ConfigError(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}") from None
