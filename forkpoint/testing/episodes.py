"""`new_episodes`: replay what the cassette has, send the rest upstream, keep both.

Built from the proxy's public parts rather than an engine mode: the test's run records, and its
upstream sender answers a request from the cassette when a recorded exchange has the same
fingerprint (the earliest unserved one, as replay picks) and sends it live otherwise. An answer
from the cassette carries its recorded step in a header, so `merge` can put the recorded
exchange itself, with its timings and chunk offsets, into the new cassette.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Protocol

from forkpoint.engine import matching
from forkpoint.engine.decide import EngineConfig
from forkpoint.engine.encoding import header
from forkpoint.engine.redaction import REDACTED, redact_route
from forkpoint.models import Exchange, Headers
from forkpoint.runtime.upstream import Sender, UpstreamResponse

REPLAYED_HEADER = "x-forkpoint-replayed-step"


class LiveSender(Sender, Protocol):
    async def close(self) -> None: ...


class _Recorded:
    """A recorded exchange's response, as an upstream response the gateway streams on."""

    def __init__(self, exchange: Exchange):
        self._exchange = exchange
        self.status = exchange.status or 502
        kept = tuple((k, v) for k, v in exchange.response_headers if v != REDACTED)
        self.headers: Headers = (*kept, (REPLAYED_HEADER, str(exchange.step)))

    async def chunks(self) -> AsyncIterator[bytes]:
        recorded = self._exchange
        if recorded.chunks is None:
            yield recorded.response_body
            return
        for chunk in recorded.chunks:
            yield chunk.data

    def release(self) -> None:
        pass


class EpisodeSender:
    """A `Sender` that answers from `recorded` exchanges where one matches, else goes live."""

    def __init__(self, recorded: list[Exchange], config: EngineConfig, live: LiveSender):
        self._config = config
        self._live = live
        self._recorded = {e.step: e for e in recorded}
        self._unserved: dict[str, deque[Exchange]] = {}
        for e in recorded:
            url = config.routes.resolve(e.route)
            if url is not None:  # no upstream serves its route: no request can reach it here
                key = self._key(e.method, url, e.request_body, e.request_headers)
                self._unserved.setdefault(key, deque()).append(e)

    def _key(self, method: str, url: str, body: bytes, headers: Headers) -> str:
        # The engine fingerprints routes; here the request is already resolved to its URL, so
        # both sides are compared as URLs, redacted alike.
        return matching.fingerprint(
            method,
            redact_route(url, self._config.redact_query),
            body,
            header(headers, "content-encoding"),
            self._config.match,
        )

    async def send(self, method: str, url: str, headers: Headers, body: bytes) -> UpstreamResponse:
        queue = self._unserved.get(self._key(method, url, body, headers))
        if queue:
            return _Recorded(queue.popleft())
        return await self._live.send(method, url, headers, body)

    async def close(self) -> None:
        await self._live.close()

    def merge(self, run_id: str, exchanges: list[Exchange]) -> list[Exchange]:
        """The run's exchanges, each one answered from the cassette swapped for the recorded
        one, then the recorded ones this run did not ask for; numbered in that order."""
        merged = []
        for exchange in exchanges:
            step = header(exchange.response_headers, REPLAYED_HEADER)
            merged.append(exchange if step is None else self._recorded[int(step)])
        merged += sorted((e for q in self._unserved.values() for e in q), key=lambda e: e.step)
        return [replace(e, run_id=run_id, step=step) for step, e in enumerate(merged)]
