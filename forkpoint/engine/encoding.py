"""Remove HTTP content-encodings so bodies can be read, matched and summarized.

Real upstreams compress (gzip, br, and zstd for clients that ask for it), and the cassette keeps
bodies as they crossed the wire; every reader of a body goes through `decode_body` first.
Decoding stops at `DECODE_LIMIT` bytes: a body that expands past it (a gzip bomb, or just a
huge one) is read as the bytes it is, so memory is bounded by the limit, never by the ratio.
"""

from __future__ import annotations

import contextlib
import sys
import zlib
from collections.abc import Callable, Iterable
from typing import Protocol

import brotli

from forkpoint.models import Headers

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

__all__ = [
    "DECODE_LIMIT",
    "TooLargeToDecode",
    "UndecodableBody",
    "UnknownEncoding",
    "check_body",
    "decode_body",
    "encode_body",
    "header",
]

# What a reader of a body (matching, summary, redaction) decodes at most: well above any real
# request (a prompt with images is a few MB), far below a bomb's expansion.
DECODE_LIMIT = 32 * 2**20
# A body's value not read yet: what a reader that may be handed one gets by default.
UNREAD: object = object()


class UndecodableBody(ValueError):
    """A body whose content-encoding is unknown, or whose data is corrupt for that encoding."""


class UnknownEncoding(UndecodableBody):
    """A content-encoding forkpoint cannot undo (the upstream may: the body passes as it is)."""


class TooLargeToDecode(UndecodableBody):
    """A body that decodes to more than the limit: it is read as its encoded bytes."""


def decode_headers(raw: Iterable[tuple[bytes, bytes]]) -> Headers:
    """Raw header pairs as sent on the wire (order and duplicates kept), as text."""
    return tuple([(k.decode("latin-1"), v.decode("latin-1")) for k, v in raw])


def header(headers: Headers, name: str) -> str | None:
    """The value of header `name` (any case); repeated headers are joined with ", " (RFC 9110)."""
    wanted = name.lower()
    size = len(wanted)  # most names differ in length: no need to fold their case
    found = None
    for key, value in headers:
        if len(key) == size and key.lower() == wanted:
            found = value if found is None else f"{found}, {value}"
    return found


def decode_body(
    body: bytes, content_encoding: str | None, *, partial: bool = False, limit: int = DECODE_LIMIT
) -> bytes:
    """Undo `content_encoding` ("gzip", "br", "gzip, br"…; None or "identity" for none).

    Stacked encodings are listed in the order they were applied, so they are undone in reverse.
    With `partial`, a body cut short (a stream that broke off) yields what was decoded so far
    instead of raising; corrupt data raises either way. A body that would decode to more than
    `limit` bytes raises TooLargeToDecode once that much is decoded, never holding more.
    """
    if not body:  # 204s, 304s and HEAD answers carry the header over an empty body
        return body
    codings = [c.strip().lower() for c in (content_encoding or "").split(",")]
    for coding in reversed([c for c in codings if c and c != "identity"]):
        decoder = _DECODERS.get(coding)
        if decoder is None:
            raise UnknownEncoding(f"unknown content-encoding {coding!r} in {content_encoding!r}")
        try:
            body = decoder(body, partial, limit)
        except UndecodableBody:
            raise
        except Exception as exc:  # each codec has its own error class; all mean corrupt data
            raise UndecodableBody(f"corrupt {coding} body: {exc}") from exc
    return body


def check_body(body: bytes, content_encoding: str | None, *, limit: int = DECODE_LIMIT) -> None:
    """Raise UndecodableBody when `body` is not what its content-encoding says (corrupt or cut
    short), as far as `limit` decoded bytes show; an encoding forkpoint does not know, or a
    body past the limit, is not refused (what follows is the upstream's to judge)."""
    if not content_encoding:
        return
    with contextlib.suppress(UnknownEncoding, TooLargeToDecode):
        decode_body(body, content_encoding, limit=limit)


def _truncated(coding: str, partial: bool) -> None:
    if not partial:
        raise UndecodableBody(f"{coding} body ends before its end marker (truncated)")


def _bounded(coding: str, size: int, limit: int) -> None:
    if size > limit:
        raise TooLargeToDecode(f"{coding} body decodes to more than {limit} bytes")


class _Decompressor(Protocol):
    @property
    def eof(self) -> bool: ...

    @property
    def unused_data(self) -> bytes: ...

    def decompress(self, data: bytes, max_length: int, /) -> bytes: ...


def _members(
    coding: str, new: Callable[[], _Decompressor], data: bytes, partial: bool, limit: int
) -> bytes:
    """A body of members (gzip) or frames (zstd) back to back, each decoded by a decompressor
    of its own; asking for one byte more than the limit allows tells a body past it."""
    out: list[bytes] = []
    size = 0
    while data:
        member = new()
        out.append(member.decompress(data, limit - size + 1))
        size += len(out[-1])
        _bounded(coding, size, limit)
        if not member.eof:
            _truncated(coding, partial)
            break
        data = member.unused_data
    return b"".join(out)


def _gzip(data: bytes, partial: bool, limit: int) -> bytes:
    return _members(
        "gzip", lambda: zlib.decompressobj(wbits=zlib.MAX_WBITS | 16), data, partial, limit
    )


def _deflate(data: bytes, partial: bool, limit: int) -> bytes:
    # RFC 9110 says zlib-wrapped, but some servers send raw deflate; accept both.
    try:
        stream = zlib.decompressobj(wbits=zlib.MAX_WBITS)
        out = stream.decompress(data, limit + 1)
    except zlib.error:
        stream = zlib.decompressobj(wbits=-zlib.MAX_WBITS)
        out = stream.decompress(data, limit + 1)
    _bounded("deflate", len(out), limit)
    if not stream.eof:
        _truncated("deflate", partial)
    elif stream.unused_data:
        raise UndecodableBody("deflate body has data after its end marker")
    return out


def _brotli(data: bytes, partial: bool, limit: int) -> bytes:
    stream = brotli.Decompressor()
    out = stream.process(data, output_buffer_limit=limit + 1)
    _bounded("br", len(out), limit)
    if not stream.is_finished():
        _truncated("br", partial)
    return bytes(out)


def _zstd(data: bytes, partial: bool, limit: int) -> bytes:
    return _members("zstd", zstd.ZstdDecompressor, data, partial, limit)


_DECODERS: dict[str, Callable[[bytes, bool, int], bytes]] = {
    "gzip": _gzip,
    "x-gzip": _gzip,
    "deflate": _deflate,
    "br": _brotli,
    "zstd": _zstd,
}


def encode_body(body: bytes, content_encoding: str | None) -> bytes:
    """Apply `content_encoding` to a plain body (after a redaction rewrote it); an unknown
    coding raises UndecodableBody."""
    codings = [c.strip().lower() for c in (content_encoding or "").split(",")]
    for coding in [c for c in codings if c and c != "identity"]:
        encoder = _ENCODERS.get(coding)
        if encoder is None:
            raise UndecodableBody(f"unknown content-encoding {coding!r} in {content_encoding!r}")
        body = encoder(body)
    return body


def _gzip_encode(data: bytes) -> bytes:
    packer = zlib.compressobj(wbits=zlib.MAX_WBITS | 16)
    return packer.compress(data) + packer.flush()


_ENCODERS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": _gzip_encode,
    "x-gzip": _gzip_encode,
    "deflate": zlib.compress,
    "br": brotli.compress,
    "zstd": zstd.compress,
}
