"""Header columns: how an exchange's headers are kept, so a run stores what repeats once.

A client sends the same request headers on every call of a run, and an API answers with the
same names in the same order, only a few values changing (a date, a request id, a count).
Storing every exchange's list whole kept about 1.4 KB a step of repetition. A column holds
either the list (`[[name, value], ...]`, as every cassette before schema 10 did) or, when its
names are an earlier step's of the same run and column, in the same order, that step's list
with the values that differ: `{"step": S, "values": [[index, value], ...]}`, or, as the SQLite
cassette writes it from schema 12 (a `compact` packer), the same flat: `[S, index, value, ...]`
(a list whose first item is a number, where a whole list's are pairs), and where that is
smaller, compressed against the list it refers to (what changes is mostly ids, dates and
counts, which the list's own values resemble): bytes, `S:` then a zstd frame of
`[index, value, ...]` whose dictionary is the list of step S as `dump` writes it. The step
referred to holds its list whole, so a reference never leads to another. Names, case, order
and repeated names read back as recorded: only values are ever replaced, by position.

Like a request's manifest (`manifests`), a reference is to a step written before it (in an
earlier transaction, or earlier in the same one), and readers resolve them in step order.
"""

from __future__ import annotations

from typing import Any

import orjson

from forkpoint.cassettes.blobs import ZSTD_LEVEL, zstd
from forkpoint.cassettes.bounded import Bounded, Warm
from forkpoint.models import Headers

REQUEST, RESPONSE = "request", "response"
# Runs whose last list written whole (per column) a writer keeps in mind, to refer to.
KNOWN = 512
# Of those, the lists compressed against last that keep their compressor (about 46 KB each).
WARM = 32


def dump(headers: Headers) -> str:
    return orjson.dumps([list(pair) for pair in headers]).decode()


def _dictionary(headers: Headers) -> zstd.ZstdDict:
    """What a compressed reference to `headers` was compressed against."""
    return zstd.ZstdDict(dump(headers).encode(), is_raw=True)


class _Whole:
    """A list written whole, to refer to: its step, its pairs, and (made when first needed)
    a compressor against it. The compressor digests the list once: compressing against it
    then costs about 2 us, against 12 for a frame with the list as a prefix each time (which
    reads the same: `HeaderSets` decompresses with the list as a prefix)."""

    __slots__ = ("_compressor", "headers", "step")

    def __init__(self, step: int, headers: Headers) -> None:
        self.step, self.headers = step, headers
        self._compressor: zstd.ZstdCompressor | None = None

    def drop_compressor(self) -> None:
        self._compressor = None

    def compress(self, data: bytes) -> bytes:
        if self._compressor is None:
            digested = _dictionary(self.headers).as_digested_dict
            self._compressor = zstd.ZstdCompressor(level=ZSTD_LEVEL, zstd_dict=digested)
        return self._compressor.compress(data, zstd.ZstdCompressor.FLUSH_FRAME)


class HeaderPacker:
    """The writer's side: per run and column, the last list written whole, to refer to."""

    def __init__(self, *, compact: bool = False) -> None:
        self._compact = compact
        self._whole: Bounded[tuple[str, str], _Whole] = Bounded(KNOWN)
        self._warm: Warm[tuple[str, str]] = Warm(WARM)  # the lists that keep a compressor

    def pack(self, run_id: str, step: int, column: str, headers: Headers) -> str | bytes:
        """The column's value for `headers` of `step`: a reference to the run's last list
        written whole when the names are the same, else the list (then the one to refer to)."""
        key = (run_id, column)
        whole = self._whole.get(key)
        if whole is not None and whole.step < step and headers == whole.headers:  # most requests'
            return f'{{"step":{whole.step},"values":[]}}'
        if whole is not None and whole.step < step and len(whole.headers) == len(headers):
            values: list[list[object]] = []
            for index, (pair, was) in enumerate(zip(headers, whole.headers, strict=True)):
                if pair != was:  # the pairs compared whole first: most are the same
                    if pair[0] != was[0]:
                        break
                    values.append([index, pair[1]])
            else:
                if self._compact:
                    if values:
                        self._warm.used(key, whole)
                    return _compacted(whole, [v for pair in values for v in pair])
                return orjson.dumps({"step": whole.step, "values": values}).decode()
        self._whole.put(key, _Whole(step, headers))  # past KNOWN, the run written longest ago goes
        return dump(headers)

    def failed(self) -> None:
        """The transaction rolled back: the lists written whole in it are not there."""
        self._whole.clear()
        self._warm.clear()


def _compacted(whole: _Whole, values: list[object]) -> str | bytes:
    """A flat reference, or where smaller, its values compressed against the list."""
    flat = orjson.dumps([whole.step, *values]).decode()
    if not values:
        return flat
    packed = f"{whole.step}:".encode() + whole.compress(orjson.dumps(values))
    return packed if len(packed) < len(flat) else flat


class HeaderSets:
    """The reader's side: one run's header columns, read in step order."""

    def __init__(self) -> None:
        self._whole: dict[tuple[str, int], Headers] = {}
        self._dictionaries: dict[tuple[str, int], zstd.ZstdDict] = {}

    def read(self, column: str, step: int, text: str | bytes | None) -> Headers:
        """Raises ValueError (or TypeError, KeyError, IndexError, zstd.ZstdError) for a
        column that does not read, or refers to a step whose list does not."""
        if isinstance(text, bytes):
            text = self._decompressed(column, text)
        value = _load(text)
        if isinstance(value, list) and value and not isinstance(value[0], list):
            if len(value) % 2 != 1:
                raise ValueError("a reference with an index and no value")
            value = {"step": value[0], "values": list(zip(value[1::2], value[2::2], strict=True))}
        if isinstance(value, dict):
            base = self._whole.get((column, value.get("step")))  # type: ignore[arg-type]
            if base is None:
                raise ValueError(f"it refers to step {value.get('step')!r}, which does not read")
            pairs = list(base)
            for index, replaced in value["values"]:
                if not isinstance(index, int) or not 0 <= index < len(pairs):
                    raise ValueError(f"no header {index!r} at step {value['step']}")
                pairs[index] = (pairs[index][0], str(replaced))
            return tuple(pairs)
        headers = tuple((str(name), str(val)) for name, val in value)
        self._whole[(column, step)] = headers
        return headers

    def _decompressed(self, column: str, packed: bytes) -> str:
        """A compressed reference as its flat text: `[S, index, value, ...]`."""
        step, colon, frame = packed.partition(b":")
        if not colon or not step.isdigit():
            raise ValueError("not a compressed reference")
        key = (column, int(step))
        dictionary = self._dictionaries.get(key)
        if dictionary is None:
            base = self._whole.get(key)
            if base is None:
                raise ValueError(f"it refers to step {int(step)}, which does not read")
            dictionary = self._dictionaries[key] = _dictionary(base)
        values = zstd.decompress(frame, zstd_dict=dictionary.as_prefix)
        return "[" + step.decode() + ("," + values.decode()[1:] if values != b"[]" else "]")


def _load(text: str | None) -> Any:
    return orjson.loads(text or "[]")
