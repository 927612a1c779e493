import gzip
import zlib

import brotli
import pytest

from forkpoint.engine.encoding import (
    TooLargeToDecode,
    UndecodableBody,
    check_body,
    decode_body,
    header,
)

try:
    from compression import zstd  # type: ignore[import-not-found]
except ImportError:
    from backports import zstd

BODY = (
    b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,'
    b'"delta":{"content":"Hello"},"finish_reason":null}]}\n\n' * 40 + b"data: [DONE]\n\n"
)


def _raw_deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


COMPRESS = {
    "gzip": gzip.compress,
    "x-gzip": gzip.compress,
    "deflate": zlib.compress,
    "br": brotli.compress,
    "zstd": zstd.compress,
}


@pytest.mark.parametrize("coding", sorted(COMPRESS))
def test_round_trip(coding: str) -> None:
    assert decode_body(COMPRESS[coding](BODY), coding) == BODY


def test_raw_deflate_is_accepted() -> None:
    assert decode_body(_raw_deflate(BODY), "deflate") == BODY


@pytest.mark.parametrize("coding", [None, "", "identity", "IDENTITY"])
def test_identity(coding: str | None) -> None:
    assert decode_body(BODY, coding) == BODY


def test_coding_names_are_case_and_space_insensitive() -> None:
    assert decode_body(gzip.compress(BODY), "  GZip ") == BODY


def test_stacked_encodings_are_undone_in_reverse() -> None:
    stacked = brotli.compress(gzip.compress(BODY))  # gzip applied first, then br
    assert decode_body(stacked, "gzip, br") == BODY
    with pytest.raises(UndecodableBody):
        decode_body(stacked, "br, gzip")


def test_identity_inside_a_stack_is_skipped() -> None:
    assert decode_body(zstd.compress(BODY), "identity, zstd") == BODY


def test_multi_member_gzip_and_multi_frame_zstd() -> None:
    assert decode_body(gzip.compress(b"ab") + gzip.compress(b"cd"), "gzip") == b"abcd"
    assert decode_body(zstd.compress(b"ab") + zstd.compress(b"cd"), "zstd") == b"abcd"


def test_unknown_encoding_raises() -> None:
    with pytest.raises(UndecodableBody, match="unknown content-encoding 'compress'"):
        decode_body(b"x", "compress")


@pytest.mark.parametrize("coding", ["gzip", "deflate", "br", "zstd"])
def test_corrupt_data_raises(coding: str) -> None:
    with pytest.raises(UndecodableBody, match=f"corrupt {coding} body"):
        decode_body(b"this was never compressed", coding)


def test_undecodable_body_is_a_value_error() -> None:
    assert issubclass(UndecodableBody, ValueError)


def _flushed_stream(coding: str, events: list[bytes]) -> list[bytes]:
    """Compressed pieces, one per event, flushed the way a server compresses a live stream."""
    if coding == "br":
        br = brotli.Compressor()
        return [br.process(event) + br.flush() for event in events] + [br.finish()]
    if coding == "zstd":
        zs = zstd.ZstdCompressor()
        return [zs.compress(event, zs.FLUSH_BLOCK) for event in events] + [zs.flush()]
    wbits = {"gzip": zlib.MAX_WBITS | 16, "deflate": zlib.MAX_WBITS}[coding]
    zc = zlib.compressobj(wbits=wbits)
    return [zc.compress(event) + zc.flush(zlib.Z_SYNC_FLUSH) for event in events] + [zc.flush()]


@pytest.mark.parametrize("coding", ["gzip", "deflate", "br", "zstd"])
def test_cut_stream_raises_unless_partial(coding: str) -> None:
    events = [b'data: {"delta":"word %d"}\n\n' % i for i in range(20)]
    pieces = _flushed_stream(coding, events)
    assert decode_body(b"".join(pieces), coding) == b"".join(events)
    cut = b"".join(pieces[:12])  # the connection broke after the 12th event
    with pytest.raises(UndecodableBody, match="truncated"):
        decode_body(cut, coding)
    assert decode_body(cut, coding, partial=True) == b"".join(events[:12])


def test_partial_still_raises_on_corrupt_data() -> None:
    with pytest.raises(UndecodableBody):
        decode_body(b"\x1f\x8b garbage", "gzip", partial=True)


def test_trailing_garbage_raises() -> None:
    with pytest.raises(UndecodableBody):
        decode_body(zlib.compress(BODY) + b"junk", "deflate")


def test_empty_body_needs_no_decoding() -> None:
    assert decode_body(b"", "br") == b""


def test_header_is_case_insensitive_and_joins_repeats() -> None:
    headers = (("Content-Type", "text/event-stream"), ("content-encoding", "gzip"))
    assert header(headers, "content-type") == "text/event-stream"
    assert header(headers, "CONTENT-ENCODING") == "gzip"
    assert header(headers, "x-missing") is None
    repeated = (("Content-Encoding", "gzip"), ("content-encoding", "br"))
    assert header(repeated, "content-encoding") == "gzip, br"
    assert decode_body(brotli.compress(gzip.compress(BODY)), header(repeated, "content-encoding"))


@pytest.mark.parametrize("coding", sorted(COMPRESS))
def test_a_body_past_the_limit_is_too_large_to_decode_and_not_expanded(coding: str) -> None:
    body = COMPRESS[coding](b"x" * 4096)
    assert decode_body(body, coding, limit=4096) == b"x" * 4096
    with pytest.raises(TooLargeToDecode):
        decode_body(body, coding, limit=4095)


def test_a_gzip_bomb_is_refused_after_the_limit_without_decoding_it_whole() -> None:
    bomb = gzip.compress(b"\0" * 2**26) * 16  # 1 MB of members, 1 GiB decoded
    with pytest.raises(TooLargeToDecode):
        decode_body(bomb, "gzip")  # the default limit is 32 MiB
    with pytest.raises(TooLargeToDecode):
        decode_body(gzip.compress(bomb), "gzip, gzip", limit=2**20)


def test_check_body_refuses_corrupt_data_only() -> None:
    check_body(gzip.compress(BODY), "gzip")
    check_body(b"anything", "x-unknown")  # the upstream may know it
    check_body(gzip.compress(BODY), "gzip", limit=10)  # past the limit: not read, not refused
    for coding in sorted(COMPRESS):
        with pytest.raises(UndecodableBody, match=coding):
            check_body(b"\x1f\x8b not it", coding)
    with pytest.raises(UndecodableBody, match="truncated"):
        check_body(gzip.compress(BODY)[:-12], "gzip")
