"""Blobs compressed against their run's earlier ones (the SQLite cassette from schema 12).

What a run sends and receives repeats itself beyond whole messages: every answer of an API has
the same envelope and field names, a request's new message quotes the answer before it, a
question follows the pattern of the last. Compressed alone, a 1 KB answer kept about 400 bytes;
compressed against the run's earlier blobs, under 100.

A run's keyframes are its last blobs stored on their own (raw or zstd), newest last, up to
WINDOW plain bytes. A new blob of the run is compressed against them (zstd with their bytes as
a raw dictionary, `blobs.Codec.ZSTD_DICT`) when that at least halves what it would take alone
(or takes at most a sixteenth of its plain bytes, which needs no look at that); its row
names the keyframes (`contents.base`). Otherwise it is stored on its own and becomes a
keyframe. So a delta needs only blobs that are never deltas themselves: reading one blob reads
at most a few others, whatever the run's length (random access for replay and `show`), and
a keyframe is always written before, or in the same transaction as, the blobs compressed
against it (the writer forgets its keyframes when a transaction rolls back).
"""

from __future__ import annotations

from forkpoint.cassettes.blobs import ZSTD_LEVEL, zstd

# Plain bytes of a run's newest keyframes a new blob is compressed against.
WINDOW = 32 * 1024
# A blob larger than this is never a keyframe: it would push the run's others out.
FRAME_MAX = 16 * 1024
# Blobs from this size up to this one are tried against their run's keyframes (bytes).
DELTA_MIN = 64
DELTA_MAX = 64 * 1024
# A delta is kept when it is at most this share of the blob compressed alone, or, without
# compressing it alone to see (7-12 us a 4 KB blob), at most SURE of its plain bytes: JSON and
# prose compress alone to a quarter or more, so a delta that small would be kept anyway.
KEEP = 0.5
SURE = 1 / 16


def clearly_kept(delta: bytes, plain: bytes) -> bool:
    return len(delta) <= SURE * len(plain)


def kept(delta: bytes, alone: bytes) -> bool:
    return len(delta) <= KEEP * len(alone)


class Keyframes:
    """One run's keyframes, and a compressor with them as its dictionary, made when first
    needed (a digested dictionary: compressing against it costs less than compressing alone,
    making it as much as compressing a few blobs)."""

    def __init__(self) -> None:
        self._frames: list[tuple[str, bytes]] = []  # (sha256, plain bytes), oldest first
        self._size = 0
        self._compressor: zstd.ZstdCompressor | None = None

    def add(self, digest: str, plain: bytes) -> None:
        self._frames.append((digest, plain))
        self._size += len(plain)
        while self._size > WINDOW:
            self._size -= len(self._frames.pop(0)[1])
        self._compressor = None

    @property
    def bases(self) -> tuple[str, ...]:
        """The keyframes' hashes, in dictionary order."""
        return tuple(digest for digest, _ in self._frames)

    def compress(self, data: bytes) -> bytes:
        if self._compressor is None:
            dictionary = zstd.ZstdDict(b"".join(p for _, p in self._frames), is_raw=True)
            self._compressor = zstd.ZstdCompressor(
                level=ZSTD_LEVEL, zstd_dict=dictionary.as_digested_dict
            )
        return self._compressor.compress(data, zstd.ZstdCompressor.FLUSH_FRAME)

    def drop_compressor(self) -> None:
        """Free the compressor (it holds the dictionary digested): made again when needed."""
        self._compressor = None

    def __bool__(self) -> bool:
        return self._size >= 8  # zstd's least dictionary
