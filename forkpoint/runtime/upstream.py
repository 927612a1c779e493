"""The upstream sender (`forkpoint.doors.ports.Sender`): a real pooled aiohttp one, and a mock.

The real sender never decompresses: bodies pass through with their `Content-Encoding` so the
agent gets the upstream's bytes and the cassette stores exactly those bytes.

An upstream URL may carry credentials (`--upstream https://user:pw@gateway`): they are sent as
Basic auth only when the agent sent no `Authorization` of its own, so an agent's own header
goes through as it would without forkpoint (`authorized`); messages name the URL without them.

An upstream that gives no answer (a wrong host, no network, a refused port, a stall) is passed
on as what it is, a closed connection, and its agent's SDK explains it as a connection error
at best; so the sender says the cause on stderr (`log`), once per upstream and cause however
often the SDK retries, and the cassette keeps it as the exchange's error (`forkpoint show`).
"""

from __future__ import annotations

import asyncio
import io
import logging
import ssl
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp

from forkpoint.doors.heads import FIELDS_MAX, LINE_MAX
from forkpoint.doors.ports import UpstreamResponse, UpstreamSocket
from forkpoint.engine.encoding import decode_headers
from forkpoint.engine.frames import Frame
from forkpoint.engine.urls import without_userinfo
from forkpoint.errors import ConfigError, UpstreamError
from forkpoint.models import Headers

LARGE_BODY = 1024 * 1024
SAID_AT_MOST = 1024  # upstream failures remembered as said; past that, said again
log = logging.getLogger(__name__)


class _AiohttpResponse:
    def __init__(self, response: aiohttp.ClientResponse):
        self._response = response
        self.status = response.status
        self.headers: Headers = decode_headers(response.raw_headers)

    def chunks(self) -> AsyncIterator[bytes]:
        return _Chunks(self._response.content)

    def release(self) -> None:
        self._response.release()


class _Chunks:
    """A response body as it arrives, each read as aiohttp has it. An iterator of its own,
    not an async generator over aiohttp's `iter_any`: one call a chunk instead of three."""

    __slots__ = ("_content",)

    def __init__(self, content: aiohttp.StreamReader):
        self._content = content

    def __aiter__(self) -> _Chunks:
        return self

    async def __anext__(self) -> bytes:
        try:
            data = await self._content.readany()
        except (TimeoutError, aiohttp.ServerTimeoutError) as error:
            raise UpstreamError("upstream stalled mid-response", timeout=True) from error
        except aiohttp.ClientError as error:
            raise UpstreamError(f"upstream cut the response: {error}") from error
        if not data:  # its end
            raise StopAsyncIteration
        return data


class _AiohttpSocket:
    """An upstream websocket: messages whole, pings answered by aiohttp."""

    def __init__(self, socket: aiohttp.ClientWebSocketResponse, headers: Headers):
        self._socket = socket
        self.status = 101
        self.headers = headers
        self.protocol = socket.protocol
        self.close_code, self.close_reason = 1005, ""

    async def messages(self) -> AsyncIterator[Frame]:
        while True:
            message = await self._socket.receive()
            if message.type is aiohttp.WSMsgType.TEXT:
                yield Frame(message.data.encode())
            elif message.type is aiohttp.WSMsgType.BINARY:
                yield Frame(message.data, binary=True)
            elif message.type is aiohttp.WSMsgType.ERROR:
                raise UpstreamError(f"upstream websocket broke: {self._socket.exception()}")
            else:  # CLOSE, CLOSING, CLOSED
                if message.type is aiohttp.WSMsgType.CLOSE and isinstance(message.extra, str):
                    self.close_reason = message.extra
                self.close_code = self._socket.close_code or 1005
                return

    async def send(self, frame: Frame) -> None:
        if frame.binary:
            await self._socket.send_bytes(frame.data)
        else:
            await self._socket.send_str(frame.data.decode(errors="replace"))

    async def close(self) -> None:
        await self._socket.close()


@dataclass
class _RefusedSocket:
    """An upstream that answered a websocket handshake with something other than 101."""

    status: int
    headers: Headers
    protocol: str | None = None
    close_code: int = 1006
    close_reason: str = ""

    async def messages(self) -> AsyncIterator[Frame]:
        return
        yield

    async def send(self, frame: Frame) -> None:
        raise UpstreamError("the upstream refused the websocket")

    async def close(self) -> None:
        pass


def tls_context(*, extra_ca: str | None = None, verify: bool = True) -> ssl.SSLContext | bool:
    """How the sender checks upstream certificates: against the system's roots plus
    `extra_ca` (a PEM file: an internal CA, a test's own), or not at all."""
    if not verify:
        return False
    if extra_ca is None:
        return True
    context = ssl.create_default_context()
    try:
        context.load_verify_locations(cafile=extra_ca)
    except (OSError, ssl.SSLError) as error:
        raise ConfigError(f"cannot read CA certificates from {extra_ca}: {error}") from error
    return context


class AiohttpSender:
    """Pooled keep-alive connections to every upstream, through one `ClientSession`."""

    def __init__(
        self,
        *,
        connect_timeout: float = 10.0,
        read_timeout: float = 600.0,
        tls: ssl.SSLContext | bool = True,
    ):
        """`tls`: how upstream certificates are checked (an SSLContext with extra CAs, True for
        the system's, False for not at all)."""
        self._timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=connect_timeout, sock_read=read_timeout
        )
        self._tls = tls
        self._session: aiohttp.ClientSession | None = None
        self._said: set[tuple[str, str]] = set()

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=self._timeout,
                auto_decompress=False,
                connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, ssl=self._tls),
                # Send the agent's headers only: no User-Agent, Accept-Encoding … of our own.
                skip_auto_headers=("User-Agent", "Accept-Encoding", "Accept", "Content-Type"),
                cookie_jar=aiohttp.DummyCookieJar(),
                # an answer's head as large as the agent's own client takes (doors.heads)
                max_line_size=LINE_MAX,
                max_field_size=LINE_MAX,
                max_headers=FIELDS_MAX,
            )
        return self._session

    async def send(
        self, method: str, url: str, headers: Headers, body: bytes | AsyncIterable[bytes]
    ) -> UpstreamResponse:
        try:
            response = await self._client().request(
                method, authorized(url, headers), headers=headers, data=_payload(body),
                allow_redirects=False,
            )  # fmt: skip
        except (TimeoutError, aiohttp.ServerTimeoutError) as error:
            shown = without_userinfo(url)
            raise self._unanswered(shown, "did not answer in time", error) from error
        except aiohttp.ClientError as error:
            raise self._unanswered(without_userinfo(url), str(error), error) from error
        return _AiohttpResponse(response)

    async def websocket(
        self, url: str, headers: Headers, protocols: tuple[str, ...]
    ) -> UpstreamSocket:
        shown = without_userinfo(url)
        try:
            socket = await self._client().ws_connect(
                authorized(url, headers), headers=list(headers), protocols=protocols,
                max_msg_size=0,
            )  # fmt: skip
        except aiohttp.WSServerHandshakeError as error:
            refused = tuple((k, v) for k, v in (error.headers or {}).items())
            return _RefusedSocket(error.status, refused)
        except (TimeoutError, aiohttp.ServerTimeoutError) as error:
            raise self._unanswered(shown, "did not answer in time", error) from error
        except aiohttp.ClientError as error:
            raise self._unanswered(shown, str(error), error) from error
        assert socket._response is not None  # aiohttp keeps the handshake's response
        return _AiohttpSocket(socket, decode_headers(socket._response.raw_headers))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def _unanswered(self, url: str, cause: str, error: BaseException) -> UpstreamError:
        """The error for a request `url`'s upstream gave no answer to, said on stderr the first
        time this upstream fails for this cause (an SDK's retries fail alike: one line, not
        one per retry)."""
        timeout = isinstance(error, TimeoutError | aiohttp.ServerTimeoutError)
        if timeout:
            failure = UpstreamError(f"upstream {url} did not answer in time", timeout=True)
        else:
            failure = UpstreamError(f"cannot reach upstream {url}: {cause}")
        key = (_origin(url), cause)
        if key not in self._said:
            if len(self._said) >= SAID_AT_MOST:
                self._said.clear()
            self._said.add(key)
            log.warning(
                "forkpoint: %s; the agent got no answer (check the upstream's address and the "
                "network)",
                failure,
            )
        return failure


def _origin(url: str) -> str:
    """`https://api.openai.com:443` of a request's URL: what an upstream is, whatever the path."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def authorized(url: str, headers: Headers) -> str:
    """Where to send a request: `url` as it is (aiohttp sends its userinfo as Basic auth), or
    without its userinfo when the agent sent an `Authorization` of its own, which is the
    credential the agent meant (two would be refused by aiohttp, and by HTTP)."""
    if "@" in url and any(name.lower() == "authorization" for name, _ in headers):
        return without_userinfo(url)
    return url


def _payload(
    body: bytes | AsyncIterable[bytes],
) -> bytes | io.BytesIO | AsyncIterable[bytes] | None:
    # aiohttp writes a large bytes body in one blocking call; a file object goes in pieces,
    # and an upload as it comes.
    if not isinstance(body, bytes):
        return body
    if len(body) > LARGE_BODY:
        return io.BytesIO(body)
    return body or None


# The test double: a handler returns (status, headers, chunks) for a request.
MockHandler = Callable[[str, str, Headers, bytes], Awaitable[tuple[int, Headers, Sequence[bytes]]]]


@dataclass
class _MockResponse:
    status: int
    headers: Headers
    _chunks: Sequence[bytes]

    async def chunks(self) -> AsyncIterator[bytes]:
        for data in self._chunks:
            await asyncio.sleep(0)
            yield data

    def release(self) -> None:
        pass


class MockSender:
    """A `Sender` for unit tests of forkpoint's own logic; records what it was sent."""

    def __init__(self, handler: MockHandler):
        self._handler = handler
        self.sent: list[tuple[str, str, Headers, bytes]] = []

    async def send(
        self, method: str, url: str, headers: Headers, body: bytes | AsyncIterable[bytes]
    ) -> UpstreamResponse:
        if not isinstance(body, bytes):
            body = b"".join([data async for data in body])
        self.sent.append((method, url, headers, body))
        status, response_headers, chunks = await self._handler(method, url, headers, body)
        return _MockResponse(status, response_headers, chunks)

    async def websocket(
        self, url: str, headers: Headers, protocols: tuple[str, ...]
    ) -> UpstreamSocket:
        raise UpstreamError(f"the mock sender opens no websockets ({url})")

    async def close(self) -> None:
        pass
