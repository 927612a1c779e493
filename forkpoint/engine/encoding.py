"""Remove HTTP content-encodings so bodies can be read, matched and summarized.

Real upstreams compress (gzip, br, and zstd for clients that ask for it), and the cassette keeps
bodies as they crossed the wire; every reader of a body goes through `decode_body` first.
"""

from __future__ import annotations

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

__all__ = ["UndecodableBody", "decode_body", "encode_body", "header"]


class UndecodableBody(ValueError):
    """A body whose content-encoding is unknown, or whose data is corrupt for that encoding."""


def decode_headers(raw: Iterable[tuple[bytes, bytes]]) -> Headers:
    """Raw header pairs as sent on the wire (order and duplicates kept), as text."""
    return tuple([(k.decode("latin-1"), v.decode("latin-1")) for k, v in raw])


def header(headers: Headers, name: str) -> str | None:
    """The value of header `name` (any case); repeated headers are joined with ", " (RFC 9110)."""
    wanted = name.lower()
    size = len(wanted)  # most names differ in length: no need to fold their case
    values = [value for key, value in headers if len(key) == size and key.lower() == wanted]
    return ", ".join(values) if values else None


def decode_body(body: bytes, content_encoding: str | None, *, partial: bool = False) -> bytes:
    """Undo `content_encoding` ("gzip", "br", "gzip, br"…; None or "identity" for none).

    Stacked encodings are listed in the order they were applied, so they are undone in reverse.
    With `partial`, a body cut short (a stream that broke off) yields what was decoded so far
    instead of raising; corrupt data raises either way.
    """
    if not body:  # 204s, 304s and HEAD answers carry the header over an empty body
        return body
    codings = [c.strip().lower() for c in (content_encoding or "").split(",")]
    for coding in reversed([c for c in codings if c and c != "identity"]):
        decoder = _DECODERS.get(coding)
        if decoder is None:
            raise UndecodableBody(f"unknown content-encoding {coding!r} in {content_encoding!r}")
        try:
            body = decoder(body, partial)
        except UndecodableBody:
            raise
        except Exception as exc:  # each codec has its own error class; all mean corrupt data
            raise UndecodableBody(f"corrupt {coding} body: {exc}") from exc
    return body


def _truncated(coding: str, partial: bool) -> None:
    if not partial:
        raise UndecodableBody(f"{coding} body ends before its end marker (truncated)")


class _Decompressor(Protocol):
    @property
    def eof(self) -> bool: ...

    @property
    def unused_data(self) -> bytes: ...

    def decompress(self, data: bytes) -> bytes: ...


def _members(coding: str, new: Callable[[], _Decompressor], data: bytes, partial: bool) -> bytes:
    """A body of members (gzip) or frames (zstd) back to back, each decoded by a decompressor
    of its own."""
    out: list[bytes] = []
    while data:
        member = new()
        out.append(member.decompress(data))
        if not member.eof:
            _truncated(coding, partial)
            break
        data = member.unused_data
    return b"".join(out)


def _gzip(data: bytes, partial: bool) -> bytes:
    return _members("gzip", lambda: zlib.decompressobj(wbits=zlib.MAX_WBITS | 16), data, partial)


def _deflate(data: bytes, partial: bool) -> bytes:
    # RFC 9110 says zlib-wrapped, but some servers send raw deflate; accept both.
    try:
        stream = zlib.decompressobj(wbits=zlib.MAX_WBITS)
        out = stream.decompress(data)
    except zlib.error:
        stream = zlib.decompressobj(wbits=-zlib.MAX_WBITS)
        out = stream.decompress(data)
    if not stream.eof:
        _truncated("deflate", partial)
    elif stream.unused_data:
        raise UndecodableBody("deflate body has data after its end marker")
    return out


def _brotli(data: bytes, partial: bool) -> bytes:
    stream = brotli.Decompressor()
    out = stream.process(data)
    if not stream.is_finished():
        _truncated("br", partial)
    return bytes(out)


def _zstd(data: bytes, partial: bool) -> bytes:
    return _members("zstd", zstd.ZstdDecompressor, data, partial)


_DECODERS: dict[str, Callable[[bytes, bool], bytes]] = {
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
