"""Manifests: how a body column names its bytes, so a run's storage grows with what is new.

A body is cut into segments (`blobs.segments`), each stored once as a blob; the body's column
holds its manifest, the JSON list of its segments' hashes. A chat request resends the whole
conversation every turn, so a list would grow with every turn and a run of n turns would keep
n²/2 hashes. A request that extends an earlier request of its run therefore refers to it:
`{"step": S, "take": P, "add": [...]}` is the first P hashes of step S's request, then the
ones added. Readers resolve them in step order (`Bodies`).

A manifest names a blob by its sha256 (hex), or, in the SQLite cassette from schema 12, by the
number its `contents` row was given: a few bytes where a hash took 66, in every body column
and every blob's index entry. The store gives the numbers inside its write transaction, so the
`Packer` (run before it) leaves a `Manifest` of hashes, which the store then names (`dump`).
A `compact` packer (the SQLite cassette's) also compresses a run's blobs against its earlier
ones (`deltas`). Readers take either name, and a reader of a store holds the blobs' hashes, so
a body read is checked against them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from forkpoint.cassettes import blobs, deltas
from forkpoint.cassettes.bounded import Bounded, Warm
from forkpoint.cassettes.headers import HeaderPacker

# Blob rows a store keeps in mind as stored, so a request's history is not compressed again
# every turn; and the runs whose last request it keeps in mind, to refer to.
KNOWN_BLOBS = 100_000
KNOWN_RUNS = 256
# Segments at least this large are looked up before being compressed (bytes): a workspace
# file kept from the last snapshot is worth a query, a small segment is not.
ASK_FIRST = 64 * 1024
# Responses under this size are stored whole (bytes).
WHOLE = 64 * 1024
# Runs whose keyframes' compressor a compact packer keeps (each holds its dictionary digested).
WARM_RUNS = 16
# Runs whose last request's bytes a packer keeps, and the largest it keeps (bytes): a request
# that starts as its run's last did is not cut and hashed again where it repeats it.
CUTS_KEPT = 16
CUT_KEPT_MAX = 4 << 20

# hash, size, codec, stored bytes, and the hashes of the blobs it was compressed against
BlobRow = tuple[str, int, str, bytes, tuple[str, ...]]
# A blob as a manifest names it: its sha256 (hex), or its number in the store.
Key = str | int


@dataclass(frozen=True, slots=True)
class Manifest:
    """A body column's value before its store names the blobs: their hashes, and for a
    request that extends an earlier one of its run, that step and how many of its blobs come
    first."""

    hashes: list[str]
    step: int | None = None
    take: int = 0

    def dump(self, key: Callable[[str], Key] | None = None) -> str:
        """The column's text, each blob named by `key(hash)` (by its hash without one). A
        reference is `{"step": S, "take": P, "add": [...]}`, or where blobs are numbered
        (schema 12) the same flat: `[[S, P], ...]`."""
        if key is None:
            if self.step is None:
                return orjson.dumps(self.hashes).decode()
            return orjson.dumps({"step": self.step, "take": self.take, "add": self.hashes}).decode()
        names = [key(digest) for digest in self.hashes]
        if self.step is not None:
            names.insert(0, [self.step, self.take])  # type: ignore[arg-type]
        return orjson.dumps(names).decode()


class Packer:
    """Turns bodies into manifests and the blob rows a store lacks, before its transaction,
    so a write holds the store's lock only to insert. A `compact` packer (the SQLite
    cassette's, from schema 12) compresses a run's blobs against its keyframes (`deltas`), and
    packs header columns and fingerprints compactly (`rows.exchange_values`)."""

    def __init__(self, *, compact: bool = False) -> None:
        self.compact = compact
        # Blobs known to be stored, with their number where the store gives one.
        self._known: Bounded[str, int | None] = Bounded(KNOWN_BLOBS)
        # Per run, the step and hashes of the last request packed: the next one may extend it.
        self._requests: Bounded[str, tuple[int, list[str]]] = Bounded(KNOWN_RUNS)
        self._cuts: Bounded[str, _Cut] = Bounded(CUTS_KEPT)  # per run, its last request's cut
        self._frames: Bounded[str, deltas.Keyframes] = Bounded(KNOWN_RUNS)
        self._warm: Warm[str] = Warm(WARM_RUNS)
        self.headers = HeaderPacker(compact=compact)  # header columns (`cassettes.headers`)

    def pack(
        self, body: bytes, content_type: str | None, new: dict[str, BlobRow],
        stored: Callable[[str], bool],
    ) -> Manifest:  # fmt: skip
        """The body's manifest, a list; its segments not known to be stored go into `new`."""
        return Manifest(self._hashes(body, content_type, new, stored, None))

    def pack_response(
        self, body: bytes, new: dict[str, BlobRow], stored: Callable[[str], bool],
        run_id: str | None = None,
    ) -> Manifest:  # fmt: skip
        """A response's manifest. An answer rarely repeats another's parts, so one under
        WHOLE bytes is one blob (a row, not several); a larger one is cut as any body is."""
        if len(body) >= WHOLE:
            return Manifest(self._hashes(body, None, new, stored, run_id))
        return Manifest([self._stored_as(body, new, stored, run_id)] if body else [])

    def pack_request(
        self, run_id: str, step: int, body: bytes, new: dict[str, BlobRow],
        stored: Callable[[str], bool],
    ) -> Manifest:  # fmt: skip
        """A request's manifest: what it repeats of the run's last request packed (an earlier
        step) by reference, the rest as hashes. The step referred to is written before it:
        in an earlier transaction, or earlier in the same one."""
        hashes = self._request_hashes(run_id, body, new, stored)
        last = self._requests.get(run_id)
        self._requests.put(run_id, (step, hashes))
        if last is not None and last[0] < step:
            shared = _common_prefix(last[1], hashes)
            if shared:
                return Manifest(hashes[shared:], last[0], shared)
        return Manifest(hashes)

    def _request_hashes(
        self, run_id: str, body: bytes, new: dict[str, BlobRow], stored: Callable[[str], bool]
    ) -> list[str]:
        """`_hashes` of a request, its run's last request's segments taken as they were where
        it starts with them: a conversation resent whole is cut and hashed where it grew."""
        # The same bytes, the same blobs: committed with that request, or about to be with
        # this batch (a batch that fails forgets the cuts).
        cut = self._cuts.get(run_id)
        reused = 0 if cut is None else cut.repeated_by(body)
        hashes = cut.hashes[:reused] if cut else []
        ends = cut.ends[:reused] if cut else []
        start = ends[-1] if ends else 0
        for segment in blobs.split(body, start):
            hashes.append(self._stored_as(segment, new, stored, run_id))
            ends.append(start := start + len(segment))
        if len(body) <= CUT_KEPT_MAX:
            self._cuts.put(run_id, _Cut(body, ends, hashes))
        return hashes

    def _hashes(
        self, body: bytes, content_type: str | None, new: dict[str, BlobRow],
        stored: Callable[[str], bool], run_id: str | None,
    ) -> list[str]:  # fmt: skip
        # Not known is nearly always new: compressing the odd small segment stored already
        # costs less than asking `stored` first; a large one is worth asking.
        return [
            self._stored_as(segment, new, stored, run_id)
            for segment in blobs.segments(body, content_type)
        ]

    def _stored_as(
        self, segment: bytes, new: dict[str, BlobRow], stored: Callable[[str], bool],
        run_id: str | None,
    ) -> str:  # fmt: skip
        """The segment's hash, its blob row added to `new` unless known to be stored."""
        digest = blobs.content_hash(segment)
        if digest in self._known or digest in new:
            return digest
        if len(segment) >= ASK_FIRST and stored(digest):
            self._known.put(digest, None)
            return digest
        if not (self.compact and run_id is not None and len(segment) >= deltas.DELTA_MIN):
            new[digest] = (digest, len(segment), *blobs.compress(segment), ())
            return digest
        frames = self._frames.get(run_id)
        if frames is None:
            frames = deltas.Keyframes()
        self._frames.put(run_id, frames)  # the run packed last is forgotten last
        delta, alone = None, None
        if frames and len(segment) <= deltas.DELTA_MAX:
            self._warm.used(run_id, frames)
            delta = frames.compress(segment)
            if not deltas.clearly_kept(delta, segment):  # else no need to judge it by alone
                alone = blobs.compress(segment)
            if alone is None or deltas.kept(delta, alone[1]):
                new[digest] = (digest, len(segment), blobs.Codec.ZSTD_DICT, delta, frames.bases)
                return digest
        codec, data = alone or blobs.compress(segment)
        if len(segment) <= deltas.FRAME_MAX:
            frames.add(digest, segment)
        new[digest] = (digest, len(segment), codec, data, ())
        return digest

    def known(self, digest: str) -> int | None:
        """The number a stored blob was given, where this packer knows it."""
        return self._known.get(digest)

    def committed(self, rows: Iterable[BlobRow], numbers: Mapping[str, int] | None = None) -> None:
        """The rows are in the store now (its transaction committed), numbered `numbers`."""
        for row in rows:
            self._known.put(row[0], None if numbers is None else numbers.get(row[0]))

    def failed(self) -> None:
        """The transaction rolled back: the requests, headers and keyframes packed for it are
        not there to refer to."""
        self._requests.clear()
        self._cuts.clear()
        self._frames.clear()
        self._warm.clear()
        self.headers.failed()


@dataclass(frozen=True, slots=True)
class _Cut:
    """A request as it was packed: its bytes, where its segments end (`blobs.split`), their
    hashes."""

    body: bytes
    ends: list[int]
    hashes: list[str]

    def repeated_by(self, body: bytes) -> int:
        """How many of these segments `body` starts with that `blobs.split(body)` cuts alike:
        those the segment after them is repeated too (the match that ended each is in it),
        short of the last two (a list's end and the rest are cut apart from the matches)."""
        if len(body) < 2 * blobs.MIN_SEGMENT:  # kept whole
            return 0
        view = memoryview(self.body)
        low, high = 0, len(self.ends) - 2  # `body` repeats the first `low` + 1 segments
        if high <= 0 or not body.startswith(view[: self.ends[0]]):
            return 0
        if body.startswith(view[: self.ends[high]]):  # most requests: all but the tail
            return high
        while high - low > 1:
            middle = (low + high) // 2
            if body.startswith(view[: self.ends[middle]]):
                low = middle
            else:
                high = middle
        return low


def _common_prefix(a: list[str], b: list[str]) -> int:
    most = min(len(a), len(b)) - 1
    if most > 0 and a[:most] == b[:most]:  # most requests: all the last one's but its tail
        return most + (a[most] == b[most])
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class Bodies:
    """One run's bodies, read in step order: each request's blobs are kept, so a later
    request that refers to one resolves."""

    def __init__(self) -> None:
        self._requests: dict[int, list[Key]] = {}

    def request(self, step: int, manifest: str | None) -> list[Key]:
        """Raises ValueError for a manifest that does not read, or refers to a step that does
        not (the error is then that step's too)."""
        value = _load(manifest)
        if isinstance(value, list) and value and isinstance(value[0], list):  # flat
            ref = value[0] + [None, None]
            value = {"step": ref[0], "take": ref[1], "add": value[1:]}
        if isinstance(value, dict):
            earlier = self._requests.get(value.get("step"))  # type: ignore[arg-type]
            take, add = value.get("take"), value.get("add")
            if earlier is None or not isinstance(take, int) or add is None or not _key_list(add):
                raise ValueError(f"it refers to step {value.get('step')!r}, which does not read")
            keys = earlier[:take] + list(add)
        elif _key_list(value):
            keys = value
        else:
            raise ValueError("not a list of blobs")
        self._requests[step] = keys
        return keys

    @staticmethod
    def other(manifest: str | None) -> list[Key]:
        """A response's or a snapshot's blobs: always a list."""
        value = _load(manifest)
        if not _key_list(value):
            raise ValueError("not a list of blobs")
        return value


def _load(manifest: str | None) -> Any:
    try:
        return orjson.loads(manifest or "[]")
    except orjson.JSONDecodeError as error:
        raise ValueError(str(error)) from None


def _key_list(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(k, str) or (isinstance(k, int) and not isinstance(k, bool)) for k in value
    )


# A stored blob as a store's `Fetch` gives it: its key, codec, stored bytes, the blobs it was
# compressed against (a JSON list of their numbers, or None) and its sha256 (32 bytes; None
# where the key is the hash itself).
StoredBlob = tuple[Key, str, bytes, str | None, bytes | None]
Fetch = Callable[[list[Key]], Iterable[StoredBlob]]
# How deep a blob compressed against others may lie under others compressed likewise: a
# writer makes one level (`deltas`), two processes writing one blob at once may make two.
DEPTH = 8


class Blobs:
    """Stored blobs by key, fetched in batches with the blobs they were compressed against,
    each decompressed once however many bodies share it, and checked against its hash."""

    def __init__(self, fetch: Fetch, size: int = 500):
        self._fetch = fetch
        self._size = size
        self._stored: dict[Key, StoredBlob] = {}
        # what each was compressed against (None: a list that does not read)
        self._bases: dict[Key, tuple[int, ...] | None] = {}
        self._dictionaries: dict[tuple[int, ...], blobs.zstd.ZstdDict] = {}
        self._plain: dict[Key, bytes] = {}

    def load(self, keys: Iterable[Key]) -> Blobs:
        """Fetch `keys` (and what they were compressed against) not fetched yet."""
        wanted = [k for k in dict.fromkeys(keys) if k not in self._stored]
        for _ in range(DEPTH + 1):
            if not wanted:
                break
            for start in range(0, len(wanted), self._size):
                for row in self._fetch(wanted[start : start + self._size]):
                    self._stored[row[0]] = row
                    self._bases[row[0]] = _bases(row[3])
            wanted = list(dict.fromkeys(
                base for key in wanted for base in self._bases.get(key) or ()
                if base not in self._stored
            ))  # fmt: skip
        return self

    def join(self, keys: list[Key]) -> bytes:
        """Raises KeyError for a missing blob, ValueError for one that does not read back."""
        parts = [self._plain.get(key) for key in keys]  # a run's requests repeat most of them
        if None in parts:  # blobs read for the first time
            pairs = zip(keys, parts, strict=True)
            parts = [self.plain(key) if part is None else part for key, part in pairs]
        return b"".join(parts)  # type: ignore[arg-type]

    def plain(self, key: Key, depth: int = 0) -> bytes:
        found = self._plain.get(key)
        if found is not None:
            return found
        _, codec, data, _, digest = self._stored[key]
        dictionary = None
        if codec == blobs.Codec.ZSTD_DICT:
            dictionary = self._dictionary(key, depth)
        try:
            plain = blobs.decompress(codec, bytes(data), dictionary)
        except blobs.zstd.ZstdError as error:
            raise ValueError(f"blob {key} does not decompress: {error}") from None
        if digest is None and isinstance(key, str):
            good = blobs.content_hash(plain) == key
        else:
            good = digest is not None and hashlib.sha256(plain).digest() == bytes(digest)
        if not good:
            raise ValueError(f"blob {key} does not read back as its bytes")
        self._plain[key] = plain
        return plain

    def _dictionary(self, key: Key, depth: int) -> blobs.zstd.ZstdDict:
        """What blob `key` was compressed against: its bases' bytes, made once per set."""
        bases = self._bases[key]
        if bases is None:
            raise ValueError(f"blob {key} names what it was compressed against unreadably")
        if not isinstance(key, int) or any(b >= key for b in bases):
            raise ValueError(f"blob {key} names no earlier blobs to read it with")
        if depth >= DEPTH:
            raise ValueError(f"blob {key} lies under more than {DEPTH} others")
        found = self._dictionaries.get(bases)
        if found is None:
            content = b"".join(self.plain(b, depth + 1) for b in bases)
            found = self._dictionaries[bases] = blobs.dictionary(content)
        return found


def _bases(listed: str | None) -> tuple[int, ...] | None:
    """The numbers of the blobs a stored blob was compressed against (None: not readable)."""
    if listed is None:
        return ()
    try:
        bases = orjson.loads(listed)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(bases, list) or not all(type(b) is int for b in bases):
        return None
    return tuple(bases)


def wanted(key_lists: Iterable[list[Key]]) -> list[Key]:
    """Every blob named, once."""
    return list(dict.fromkeys(k for keys in key_lists for k in keys))


def fetch_in_chunks(keys: list[Key], fetch: Fetch, size: int = 500) -> Blobs:
    return Blobs(fetch, size).load(keys)
