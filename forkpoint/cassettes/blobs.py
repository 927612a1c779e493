"""Content-addressed, compressed blobs, and the splitting that makes LLM requests dedupe.

An LLM request resends the whole conversation every turn, so turn N's body is turn N-1's body
plus a little. Hashing whole bodies would store the history N times. Instead a body is cut
into segments at the comma before each JSON object that opens with `"role"` or `"type"` (a
message, an input item or a content block) and where a list of them ends; the serializer
writes an unchanged message as the same bytes every turn, so each segment is stored once and
a body is a list of segment hashes (see `manifests`).
The cut is only an optimization: joining the segments gives back the exact bytes, whatever
the body is.
"""

from __future__ import annotations

import hashlib
import re
import sys
import threading

import orjson

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

# Where to cut: at the comma before an object that starts a message or item (`{"role"` /
# `{"type"`), and after the list they are in ends (`}]`). A message then reads the same bytes
# whether it is the last of its request or not (the tail `], "model": …}` is a segment of its
# own), so the next turn finds it stored.
_CUT = re.compile(rb'\{\s*"(?:role|type)"')
_LIST_END = re.compile(rb"\}\s*\]")
_SPACE = b" \t\r\n"
# Segments smaller than this are merged into the previous one: blob rows cost ~100 bytes each.
MIN_SEGMENT = 256
# Below this size compression does not pay for its frame header.
MIN_COMPRESS = 128
ZSTD_LEVEL = 3


class Codec:
    RAW = "raw"
    ZSTD = "zstd"
    # zstd against a dictionary: the plain bytes of earlier blobs, which the row names
    # (`deltas`), so only what the blob adds to them is stored.
    ZSTD_DICT = "zstd-dict"


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def split(body: bytes, start: int = 0) -> list[bytes]:
    """Cut a body into segments that repeat across turns; `b"".join(split(b)) == b`.
    `start`, where one of the segments `split(body)` gives ends, short of its last two: the
    segments after it, cut as `split(body)` cuts them (a cut there depends on nothing after the
    match that made it, the first this scan finds)."""
    if len(body) < 2 * MIN_SEGMENT:
        return [body] if body else []
    segments: list[bytes] = []
    last = -1
    for match in _CUT.finditer(body, start):
        last = cut = match.start()
        while cut > 0 and body[cut - 1] in _SPACE:
            cut -= 1
        if cut > 0 and body[cut - 1] == 0x2C:  # ","
            cut -= 1
        else:
            cut = match.start()
        if cut - start >= MIN_SEGMENT:
            segments.append(body[start:cut])
            start = cut
    end = _LIST_END.search(body, max(last, start)) if last >= 0 else None
    if end is not None and end.start() + 1 - start >= MIN_SEGMENT:
        segments.append(body[start : end.start() + 1])
        start = end.start() + 1
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


def dictionary(content: bytes) -> zstd.ZstdDict:
    """A raw dictionary of earlier blobs' bytes, to read a ZSTD_DICT blob with (ValueError
    for one too short to be any: zstd takes 8 bytes at least)."""
    if len(content) < 8:
        raise ValueError("a blob compressed against fewer than 8 bytes")
    return zstd.ZstdDict(content, is_raw=True)


def decompress(codec: str, data: bytes, against: zstd.ZstdDict | None = None) -> bytes:
    """A blob's plain bytes; `against` is what a ZSTD_DICT blob was compressed against.
    Raises ValueError for an unknown codec or a missing dictionary, zstd.ZstdError for bytes
    that do not decompress."""
    if codec == Codec.ZSTD:
        return zstd.decompress(data)
    if codec == Codec.RAW:
        return data
    if codec == Codec.ZSTD_DICT:
        if against is None:
            raise ValueError("a blob compressed against others, read without them")
        # one frame, its dictionary digested once for all the blobs compressed against it
        reader = zstd.ZstdDecompressor(zstd_dict=against.as_digested_dict)
        plain = reader.decompress(data)
        if not reader.eof or reader.unused_data:
            raise zstd.ZstdError("not one whole zstd frame")
        return plain
    raise ValueError(f"unknown blob codec {codec!r}")
