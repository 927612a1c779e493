"""A writer's memory of recent runs, kept bounded: what it forgets first is what it used last
longest ago.

`Bounded` is a dict that forgets its oldest entries past a limit. `Warm` keeps the zstd
compressors of the few holders used last (a run's keyframes, a run's header list): each holds
its dictionary digested, which makes compressing against it cheap and costs memory, so a
holder it forgets drops its compressor and makes it again when next used.
"""

from __future__ import annotations

from typing import Protocol


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

    def __len__(self) -> int:
        return len(self._items)

    def oldest(self) -> V | None:
        return next(iter(self._items.values()), None)


class Compressing(Protocol):
    def drop_compressor(self) -> None:
        """Free the compressor (made again when next needed)."""
        ...


class Warm[K]:
    """The `limit` holders used last keep their compressors; the others drop theirs."""

    def __init__(self, limit: int):
        self._held: Bounded[K, Compressing] = Bounded(limit)
        self._limit = limit

    def used(self, key: K, holder: Compressing) -> None:
        """`holder` (the one known by `key`) is about to compress."""
        if key not in self._held and len(self._held) == self._limit:
            oldest = self._held.oldest()
            if oldest is not None:
                oldest.drop_compressor()
        self._held.put(key, holder)

    def clear(self) -> None:
        self._held.clear()
