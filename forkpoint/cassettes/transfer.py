"""Moving runs between the SQLite cassette and files: vcrpy YAML, JSON lines and HAR.

A production run captured by `forkpoint serve` becomes a test cassette with `export_run`, and a
cassette that vcrpy recorded, or a HAR from a browser, becomes a run to replay with
`import_file`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from forkpoint.api import DEFAULT_ROUTES
from forkpoint.cassettes.formats import har, jsonl, text
from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.errors import CassetteError, ConfigError
from forkpoint.models import Exchange, Run
from forkpoint.runtime.sessions import new_run_id

__all__ = ["FORMATS", "export_run", "guess_format", "import_file"]

Dumps = Callable[[Run, Sequence[Exchange]], str]
Loads = Callable[..., tuple[Run, list[Exchange]]]
FORMATS: dict[str, tuple[Dumps, Loads]] = {
    "vcr": (text.dumps, text.loads),
    "jsonl": (jsonl.dumps, jsonl.loads),
    "har": (har.dumps, har.loads),
}


def export_run(ref: str, *, fmt: str, cassette: str | Path) -> str:
    """RUN (id, id prefix or name) in the cassette, as the text of a `fmt` file."""
    dumps = _format(fmt)[0]
    store = SqliteStore(cassette, create=False)
    try:
        run = store.find_run(ref)
        return dumps(run, store.exchanges(run.id))
    finally:
        store.close()


def import_file(
    path: str | os.PathLike[str],
    *,
    cassette: str | Path,
    fmt: str | None = None,
    name: str | None = None,
    routes: Mapping[str, str] | None = None,
) -> tuple[Run, int]:
    """Add the run in the file at `path` to the cassette as a new run; returns it and its steps.

    The run gets a fresh id (importing a file twice makes two runs) and forgets its parent,
    which this cassette may not hold; `routes` (prefix → base URL) add to `DEFAULT_ROUTES`.
    """
    source = Path(path)
    try:
        content = source.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise CassetteError(f"cannot read {source}: {error}") from None
    loads = _format(fmt or guess_format(source, content))[1]
    run, exchanges = loads(content, source=str(source), routes={**DEFAULT_ROUTES, **(routes or {})})
    imported = replace(
        run,
        id=new_run_id(),
        name=name or run.name,
        labels={**run.labels, "imported_from": source.name},
        parent_id=None,
    )
    store = SqliteStore(cassette)
    try:
        store.create_run(imported)
        store.add_exchanges(replace(e, run_id=imported.id) for e in exchanges)
    finally:
        store.close()
    return imported, len(exchanges)


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
