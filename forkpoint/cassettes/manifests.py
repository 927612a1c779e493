"""Manifests: how a body column names its bytes, so a run's storage grows with what is new.

A body is cut into segments (`blobs.segments`), each stored once as a blob; the body's column
holds its manifest, the JSON list of its segments' hashes. A chat request resends the whole
conversation every turn, so a list would grow with every turn and a run of n turns would keep
n²/2 hashes. A request that extends an earlier request of its run therefore refers to it:
`{"step": S, "take": P, "add": [...]}` is the first P hashes of step S's request, then the
ones added. Readers resolve them in step order (`Bodies`).

Both SQL stores write through one `Packer`, so they hold the same blobs (same segments,
hashes, codec and bytes) and the same manifests for the same writes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import orjson

from forkpoint.cassettes import blobs

# Blob rows a store keeps in mind as stored, so a request's history is not compressed again
# every turn; and the runs whose last request it keeps in mind, to refer to.
KNOWN_BLOBS = 100_000
KNOWN_RUNS = 256
# Segments at least this large are looked up before being compressed (bytes): a workspace
# file kept from the last snapshot is worth a query, a small segment is not.
ASK_FIRST = 64 * 1024
# Responses under this size are stored whole (bytes).
WHOLE = 64 * 1024

BlobRow = tuple[str, int, str, bytes]  # hash, size, codec, stored bytes


class Bounded[K, V]:
    """A dict that forgets its oldest entries past `limit` (a dict keeps insertion order)."""

    def __init__(self, limit: int):
        self._items: dict[K, V] = {}
        self._limit = limit

    def get(self, key: K) -> V | None:
        return self._items.get(key)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def put(self, key: K, value: V) -> None:
        self._items.pop(key, None)
        self._items[key] = value
        if len(self._items) > self._limit:
            del self._items[next(iter(self._items))]

    def clear(self) -> None:
        self._items.clear()


class Packer:
    """Turns bodies into manifests and the blob rows a store lacks, before its transaction,
    so a write holds the store's lock only to insert."""

    def __init__(self) -> None:
        self._known: Bounded[str, None] = Bounded(KNOWN_BLOBS)
        # Per run, the step and hashes of the last request packed: the next one may extend it.
        self._requests: Bounded[str, tuple[int, list[str]]] = Bounded(KNOWN_RUNS)

    def pack(
        self, body: bytes, content_type: str | None, new: dict[str, BlobRow],
        stored: Callable[[str], bool],
    ) -> str:  # fmt: skip
        """The body's manifest, a list; its segments not known to be stored go into `new`."""
        return orjson.dumps(self._hashes(body, content_type, new, stored)).decode()

    def pack_response(
        self, body: bytes, new: dict[str, BlobRow], stored: Callable[[str], bool]
    ) -> str:
        """A response's manifest. An answer rarely repeats another's parts, so one under
        WHOLE bytes is one blob (a row, not several); a larger one is cut as any body is."""
        if len(body) >= WHOLE:
            return self.pack(body, None, new, stored)
        return orjson.dumps(self._stored_as(body, new, stored) if body else []).decode()

    def pack_request(
        self, run_id: str, step: int, body: bytes, new: dict[str, BlobRow],
        stored: Callable[[str], bool],
    ) -> str:  # fmt: skip
        """A request's manifest: what it repeats of the run's last request packed (an earlier
        step) by reference, the rest as hashes. The step referred to is written before it:
        in an earlier transaction, or earlier in the same one."""
        hashes = self._hashes(body, None, new, stored)
        last = self._requests.get(run_id)
        self._requests.put(run_id, (step, hashes))
        if last is not None and last[0] < step:
            shared = _common_prefix(last[1], hashes)
            if shared:
                add = hashes[shared:]
                return orjson.dumps({"step": last[0], "take": shared, "add": add}).decode()
        return orjson.dumps(hashes).decode()

    def _hashes(
        self, body: bytes, content_type: str | None, new: dict[str, BlobRow],
        stored: Callable[[str], bool],
    ) -> list[str]:  # fmt: skip
        # Not known is nearly always new: compressing the odd small segment stored already
        # costs less than asking `stored` first; a large one is worth asking.
        return [
            digest
            for segment in blobs.segments(body, content_type)
            for digest in self._stored_as(segment, new, stored)
        ]

    def _stored_as(
        self, segment: bytes, new: dict[str, BlobRow], stored: Callable[[str], bool]
    ) -> list[str]:
        """[the segment's hash], its blob row added to `new` unless known to be stored."""
        digest = blobs.content_hash(segment)
        if digest in self._known or digest in new:
            return [digest]
        if len(segment) >= ASK_FIRST and stored(digest):
            self._known.put(digest, None)
            return [digest]
        codec, data = blobs.compress(segment)
        new[digest] = (digest, len(segment), codec, data)
        return [digest]

    def committed(self, rows: Iterable[BlobRow]) -> None:
        """The rows are in the store now (its transaction committed)."""
        for row in rows:
            self._known.put(row[0], None)

    def failed(self) -> None:
        """The transaction rolled back: the requests packed for it are not there to refer to."""
        self._requests.clear()


def _common_prefix(a: list[str], b: list[str]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class Bodies:
    """One run's bodies, read in step order: each request's hashes are kept, so a later
    request that refers to one resolves."""

    def __init__(self) -> None:
        self._requests: dict[int, list[str]] = {}

    def request(self, step: int, manifest: str | None) -> list[str]:
        """Raises ValueError for a manifest that does not read, or refers to a step that does
        not (the error is then that step's too)."""
        value = _load(manifest)
        if isinstance(value, dict):
            earlier = self._requests.get(value.get("step"))  # type: ignore[arg-type]
            take, add = value.get("take"), value.get("add")
            if earlier is None or not isinstance(take, int) or add is None or not _hash_list(add):
                raise ValueError(f"it refers to step {value.get('step')!r}, which does not read")
            hashes = earlier[:take] + list(add)
        elif _hash_list(value):
            hashes = value
        else:
            raise ValueError("not a list of blob hashes")
        self._requests[step] = hashes
        return hashes

    @staticmethod
    def other(manifest: str | None) -> list[str]:
        """A response's or a snapshot's hashes: always a list."""
        value = _load(manifest)
        if not _hash_list(value):
            raise ValueError("not a list of blob hashes")
        return value


def _load(manifest: str | None) -> Any:
    try:
        return orjson.loads(manifest or "[]")
    except orjson.JSONDecodeError as error:
        raise ValueError(str(error)) from None


def _hash_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(h, str) for h in value)


class Blobs:
    """Stored blobs by hash, each decompressed once however many bodies share it."""

    def __init__(self, rows: Iterable[tuple[str, str, bytes]]):
        self._stored = {digest: (codec, bytes(data)) for digest, codec, data in rows}
        self._plain: dict[str, bytes] = {}

    def join(self, hashes: list[str]) -> bytes:
        """Raises KeyError for a missing blob, ValueError for one that does not decompress."""
        parts = []
        for digest in hashes:
            plain = self._plain.get(digest)
            if plain is None:
                codec, data = self._stored[digest]
                try:
                    plain = self._plain[digest] = blobs.decompress(codec, data)
                except blobs.zstd.ZstdError as error:
                    raise ValueError(f"blob {digest} does not decompress: {error}") from None
            parts.append(plain)
        return b"".join(parts)


def wanted(hash_lists: Iterable[list[str]]) -> list[str]:
    """Every hash named, once."""
    return list(dict.fromkeys(h for hashes in hash_lists for h in hashes))


def fetch_in_chunks(
    hashes: list[str], fetch: Callable[[list[str]], Iterable[tuple[str, str, bytes]]],
    size: int = 500,
) -> Blobs:  # fmt: skip
    return Blobs(row for start in range(0, len(hashes), size)
                 for row in fetch(hashes[start : start + size]))  # fmt: skip
