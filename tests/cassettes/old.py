"""Cassettes as an older forkpoint wrote them: the tables its migrations made, and rows in its
format (blobs named by hash in `blobs`; before schema 10, header lists whole and the text as
it is), written without this forkpoint's store."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from forkpoint.cassettes.headers import dump as dump_headers
from forkpoint.cassettes.manifests import Packer
from forkpoint.cassettes.rows import ADDED_IN, EXCHANGE_COLUMNS, exchange_rows, named
from forkpoint.cassettes.sqlite.schema import APPLICATION_ID, MIGRATIONS
from forkpoint.models import Exchange

# The version before header columns could refer to an earlier step's, and text be compressed.
BEFORE_REFERENCES = ADDED_IN["text_zstd"]["sqlite"] - 1


def old_cassette(path: Path, version: int, runs: dict[str, list[Exchange]]) -> Path:
    """A cassette of schema `version` (before 12) holding `runs`, each written in one batch."""
    columns = [c for c in EXCHANGE_COLUMNS if ADDED_IN.get(c, {}).get("sqlite", 0) <= version]
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        for script in MIGRATIONS[:version]:
            conn.executescript(script)
        conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version={version}")
        for run_id, exchanges in runs.items():
            conn.execute("INSERT INTO runs (id, labels, status, mode, created_at) "
                         "VALUES (?, '{}', 'finished', 'record', 1.0)", (run_id,))  # fmt: skip
            new, rows = exchange_rows(exchanges, Packer(), lambda digest: False)
            conn.executemany("INSERT OR IGNORE INTO blobs VALUES (?,?,?,?)",
                             [row[:4] for row in new.values()])  # fmt: skip
            for (values, chunks), ex in zip(rows, exchanges, strict=True):
                row = dict(zip(EXCHANGE_COLUMNS, named(values), strict=True))
                if version <= BEFORE_REFERENCES:
                    assert ex.summary is not None
                    row.update(request_headers=dump_headers(ex.request_headers),
                               response_headers=dump_headers(ex.response_headers),
                               text=ex.summary.text)  # fmt: skip
                conn.execute(f"INSERT INTO exchanges ({', '.join(columns)}) VALUES "
                             f"({','.join('?' * len(columns))})", [row[c] for c in columns])  # fmt: skip
                conn.executemany("INSERT INTO chunks VALUES (?,?,?,?,?,?)", chunks)
    return path
