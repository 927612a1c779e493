"""The SQLite cassette's blobs: `contents` from schema 12, each numbered, and `blobs`, the rows
written before, by hash.

A writer inserts the blob rows a packer made (`manifests.Packer`) at the start of its write
transaction, in the order they were packed (a keyframe before the blobs compressed against it:
`deltas`), and so learns each one's number, which the manifests written after them in the same
transaction name (`Namer`). A blob stored already (by another process, or before this one
started) keeps its row and number. Readers take a manifest's numbers from `contents` and its
hashes from `blobs`, and get each blob's hash with it, to check what they read.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

import orjson

from forkpoint.cassettes.manifests import BlobRow, Fetch, Key, Packer, StoredBlob
from forkpoint.errors import CassetteError

_INSERT = (
    "INSERT INTO contents (hash, size, codec, data, base) VALUES (?,?,?,?,?) "
    "ON CONFLICT (hash) DO NOTHING RETURNING id"
)


class Namer:
    """Inside a write transaction: the number of each blob a manifest names."""

    def __init__(self, conn: sqlite3.Connection, packer: Packer, has_blobs: bool) -> None:
        self._conn = conn
        self._packer = packer
        self._has_blobs = has_blobs
        self.numbers: dict[str, int] = {}  # the blobs inserted or found in this transaction

    def insert(self, rows: Iterable[BlobRow]) -> None:
        """Insert `rows` in order; a blob stored already keeps its row."""
        for digest, size, codec, data, bases in rows:
            base = orjson.dumps([self.number(b) for b in bases]).decode() if bases else None
            found = self._conn.execute(
                _INSERT, (bytes.fromhex(digest), size, codec, data, base)
            ).fetchone()
            self.numbers[digest] = found[0] if found else self._stored(digest)

    def __call__(self, digest: str) -> Key:
        """A blob's name in a manifest: its number, or its hash for one only in `blobs` (a
        large segment stored there before schema 12)."""
        number = self.numbers.get(digest)
        if number is None:
            number = self._packer.known(digest)
        if number is not None:
            return number
        found = self._conn.execute(
            "SELECT id FROM contents WHERE hash=?", (bytes.fromhex(digest),)
        ).fetchone()
        if found is not None:
            self.numbers[digest] = found[0]
            return int(found[0])
        if self._has_blobs and self._conn.execute(
            "SELECT 1 FROM blobs WHERE hash=?", (digest,)
        ).fetchone():
            return digest
        raise CassetteError(f"the blob {digest} a manifest names is not stored")

    def number(self, digest: str) -> int:
        """A blob's number: one another was compressed against, in `contents` always."""
        name = self(digest)
        if not isinstance(name, int):
            raise CassetteError(f"the blob {digest} another was compressed against is not stored")
        return name

    def _stored(self, digest: str) -> int:
        found = self._conn.execute(
            "SELECT id FROM contents WHERE hash=?", (bytes.fromhex(digest),)
        ).fetchone()
        if found is None:  # the insert said it was there
            raise CassetteError(f"the blob {digest} was neither inserted nor found")
        return int(found[0])


def stored(conn: sqlite3.Connection, digest: str, has_blobs: bool) -> bool:
    if conn.execute("SELECT 1 FROM contents WHERE hash=?", (bytes.fromhex(digest),)).fetchone():
        return True
    query = "SELECT 1 FROM blobs WHERE hash=?"
    return has_blobs and conn.execute(query, (digest,)).fetchone() is not None


def fetcher(conn: sqlite3.Connection, *, numbered: bool, has_blobs: bool) -> Fetch:
    """Stored blobs by key: numbers from `contents` (where the file has it), hashes from
    `blobs`. A key with no row is left out (the reader names the blob missing)."""

    def fetch(keys: list[Key]) -> list[StoredBlob]:
        numbers = [k for k in keys if isinstance(k, int)]
        hashes = [k for k in keys if isinstance(k, str)]
        found: list[StoredBlob] = []
        if numbers and numbered:
            query = (f"SELECT id, codec, data, base, hash FROM contents WHERE id IN "
                     f"({_marks(numbers)})")  # fmt: skip
            found += conn.execute(query, numbers).fetchall()
        if hashes and has_blobs:
            query = (f"SELECT hash, codec, data, NULL, NULL FROM blobs WHERE hash IN "
                     f"({_marks(hashes)})")  # fmt: skip
            found += conn.execute(query, hashes).fetchall()
        return found

    return fetch


def piece_key(
    conn: sqlite3.Connection, digest: str, *, numbered: bool, has_blobs: bool
) -> Key | None:
    """The key a piece's blob is stored under, or None."""
    if numbered:
        found = conn.execute(
            "SELECT id FROM contents WHERE hash=?", (bytes.fromhex(digest),)
        ).fetchone()
        if found is not None:
            return int(found[0])
    if has_blobs and conn.execute("SELECT 1 FROM blobs WHERE hash=?", (digest,)).fetchone():
        return digest
    return None


def response_keys(
    conn: sqlite3.Connection, rows: list[tuple[int, str | None, str | None]]
) -> dict[int, str]:
    """Per step, its response's key as `Store.response_keys` gives it: the response's
    manifest naming its blobs by hash, then its pieces' (the same text as before schema 12,
    whatever names the blobs: a journaled answer's key, made by a packer, compares equal)."""
    manifests: dict[int, object] = {}
    numbers: set[int] = set()
    for step, manifest, _ in rows:
        try:
            value = orjson.loads(manifest or "[]")
        except orjson.JSONDecodeError:
            value = None
        manifests[step] = value
        if isinstance(value, list):
            numbers.update(k for k in value if type(k) is int)
    hashes: dict[int, str] = {}
    listed = sorted(numbers)
    for start in range(0, len(listed), 500):
        part = listed[start : start + 500]
        query = f"SELECT id, hash FROM contents WHERE id IN ({_marks(part)})"
        hashes.update((n, bytes(h).hex()) for n, h in conn.execute(query, part).fetchall())
    keys = {}
    for step, manifest, pieces in rows:
        value = manifests[step]
        if isinstance(value, list):  # else damaged: its text as it is
            named = [hashes.get(k, k) if type(k) is int else k for k in value]
            manifest = orjson.dumps(named).decode()
        keys[step] = (manifest or "") + (pieces or "")
    return keys


def _marks(values: Iterable[object]) -> str:
    return ",".join("?" for _ in values)
