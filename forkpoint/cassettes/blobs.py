"""Content-addressed, compressed blobs, and the splitting that makes LLM requests dedupe.

An LLM request resends the whole conversation every turn, so turn N's body is turn N-1's body
plus a little. Hashing whole bodies would store the history N times. Instead a body is cut
into segments just before each JSON object that opens with `"role"` or `"type"` (a message,
an input item or a content block); the serializer writes an unchanged message as the same
bytes every turn, so each segment is stored once and a body is a list of segment hashes.
The cut is only an optimization: joining the segments gives back the exact bytes, whatever
the body is.
"""

from __future__ import annotations

import hashlib
import re
import sys
import threading
from collections.abc import Callable, Iterable, Mapping

import orjson

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

# An object that starts a message or item: `{"role"` / `{"type"`, with optional whitespace.
_CUT = re.compile(rb'\{\s*"(?:role|type)"')
# Segments smaller than this are merged into the previous one: blob rows cost ~100 bytes each.
MIN_SEGMENT = 256
# Below this size compression does not pay for its frame header.
MIN_COMPRESS = 128
ZSTD_LEVEL = 3


class Codec:
    RAW = "raw"
    ZSTD = "zstd"


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def split(body: bytes) -> list[bytes]:
    """Cut a body into segments that repeat across turns; `b"".join(split(b)) == b`."""
    if len(body) < 2 * MIN_SEGMENT:
        return [body] if body else []
    segments: list[bytes] = []
    start = 0
    for match in _CUT.finditer(body):
        cut = match.start()
        if cut - start >= MIN_SEGMENT:
            segments.append(body[start:cut])
            start = cut
    segments.append(body[start:])
    return segments


# A state made of parts (a workspace: its manifest, then each file) declares it with this
# content-type suffix; it is stored one part per blob, so an unchanged file is stored once.
FRAMED_SUFFIX = "+framed"


def frame(parts: list[bytes]) -> bytes:
    """Parts as one body: a JSON list of their sizes, a newline, then the parts."""
    return orjson.dumps([len(part) for part in parts]) + b"\n" + b"".join(parts)


def unframe(data: bytes) -> list[bytes]:
    header, _, rest = data.partition(b"\n")
    try:
        sizes = orjson.loads(header)
    except orjson.JSONDecodeError as error:
        raise ValueError(f"not a framed body: {error}") from error
    parts, offset = [], 0
    for size in sizes:
        parts.append(rest[offset : offset + size])
        offset += size
    if offset != len(rest):
        raise ValueError("framed body: the sizes do not add up to its length")
    return parts


def segments(data: bytes, content_type: str | None = None) -> list[bytes]:
    """How a body is cut for storage: framed parts one by one, anything else by `split`."""
    if content_type and content_type.endswith(FRAMED_SUFFIX):
        header, _, _ = data.partition(b"\n")
        return [header + b"\n", *(part for part in unframe(data) if part)]
    return split(data)


_compressors = threading.local()


def _compressor() -> zstd.ZstdCompressor:
    """One compressor per thread: making one costs as much as compressing a small segment."""
    compressor = getattr(_compressors, "zstd", None)
    if compressor is None:
        compressor = _compressors.zstd = zstd.ZstdCompressor(level=ZSTD_LEVEL)
    return compressor


def compress(data: bytes) -> tuple[str, bytes]:
    """The codec and stored bytes for one segment: zstd where it saves space, raw otherwise."""
    if len(data) >= MIN_COMPRESS:
        packed = _compressor().compress(data, zstd.ZstdCompressor.FLUSH_FRAME)
        if len(packed) < len(data):
            return Codec.ZSTD, packed
    return Codec.RAW, data


def decompress(codec: str, data: bytes) -> bytes:
    if codec == Codec.ZSTD:
        return zstd.decompress(data)
    if codec == Codec.RAW:
        return data
    raise ValueError(f"unknown blob codec {codec!r}")


# Blob rows a store keeps in mind as stored, so a request's history is not compressed again
# every turn.
KNOWN_BLOBS = 100_000
# Segments at least this large are looked up before being compressed (bytes): a workspace
# file kept from the last snapshot is worth a query, a small segment is not.
ASK_FIRST = 64 * 1024

BlobRow = tuple[str, int, str, bytes]  # hash, size, codec, stored bytes


class BoundedSet:
    """A set that forgets its oldest members past `limit` (a dict keeps insertion order)."""

    def __init__(self, limit: int):
        self._items: dict[str, None] = {}
        self._limit = limit

    def __contains__(self, item: str) -> bool:
        return item in self._items

    def add(self, item: str) -> None:
        self._items[item] = None
        if len(self._items) > self._limit:
            del self._items[next(iter(self._items))]

    def clear(self) -> None:
        self._items.clear()


class Packer:
    """Turns bodies into a manifest (the JSON list of their segments' hashes) and the blob
    rows a store lacks, before its transaction, so a write holds the store's lock only to
    insert. Both SQL stores use it: the same bytes get the same hashes, codec and data."""

    def __init__(self, limit: int = KNOWN_BLOBS):
        # Hashes known to be stored: most segments of a request were stored by an earlier turn.
        self._known = BoundedSet(limit)

    def pack(
        self,
        body: bytes,
        content_type: str | None,
        new: dict[str, BlobRow],
        stored: Callable[[str], bool],
    ) -> str:
        """The body's manifest; its segments not known to be stored are added to `new`.
        Not known is nearly always new: compressing the odd small one stored already costs
        less than asking `stored` first; a large one is worth asking."""
        hashes = []
        for segment in segments(body, content_type):
            digest = content_hash(segment)
            hashes.append(digest)
            if digest in self._known or digest in new:
                continue
            if len(segment) >= ASK_FIRST and stored(digest):
                self._known.add(digest)
                continue
            codec, data = compress(segment)
            new[digest] = (digest, len(segment), codec, data)
        return orjson.dumps(hashes).decode()

    def committed(self, rows: Iterable[BlobRow]) -> None:
        """The rows are in the store now (its transaction committed)."""
        for row in rows:
            self._known.add(row[0])

    def forget(self) -> None:
        """After a failure: what was stored may have been rolled back."""
        self._known.clear()


def manifest_hashes(manifest: str) -> list[str]:
    hashes = orjson.loads(manifest)
    if not isinstance(hashes, list) or not all(isinstance(h, str) for h in hashes):
        raise ValueError("not a list of blob hashes")
    return hashes


def join(hashes: list[str], found: Mapping[str, tuple[str, bytes]]) -> bytes:
    """A body from its segments' hashes and the (codec, data) of each stored blob; raises
    KeyError for a missing blob and ValueError for one that does not decompress."""
    parts = []
    for digest in hashes:
        codec, data = found[digest]
        try:
            parts.append(decompress(codec, data))
        except zstd.ZstdError as error:
            raise ValueError(f"blob {digest} does not decompress: {error}") from None
    return b"".join(parts)
