"""The environment that points a command's clients at the proxy, for one run, and the routes
their own settings of those variables name.

Each client SDK reads its own base-URL variable (`CLIENTS`, listed in the README). forkpoint
sets every one of them to a route of the proxy: `OPENAI_BASE_URL` to `URL/v1` (the default
route), the others under a path prefix of their own (`GOOGLE_GEMINI_BASE_URL` to
`URL/gemini`…), which `engine.config.DEFAULT_ROUTES` sends to the provider. A variable the user
had set (`OLLAMA_HOST=gpu-box`) is not lost: what it named becomes that route's upstream
(`client_routes`), so the client still reaches the server it was pointed at, through the proxy.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from forkpoint.engine.config import Routes

__all__ = ["CLIENTS", "REPLAY_KEYS", "Client", "agent_env", "client_routes"]


def _url(value: str) -> str:
    return value.strip().rstrip("/")


def ollama_host(value: str) -> str:
    """`OLLAMA_HOST` as the ollama client reads it (its `_parse_host`): a bare host or port is
    allowed, the scheme defaults to http and the port to 11434."""
    value, port = value.strip(), 11434
    scheme, _, hostport = value.partition("://")
    if not hostport:
        scheme, hostport = "http", value
    elif scheme in ("http", "https"):
        port = 80 if scheme == "http" else 443
    split = urlsplit(f"{scheme}://{hostport}")
    host = split.hostname or "127.0.0.1"
    with contextlib.suppress(ValueError):  # a name, not an address
        if isinstance(ipaddress.ip_address(host), ipaddress.IPv6Address):
            host = f"[{host}]"
    with contextlib.suppress(ValueError):  # a port that is no number fails the client anyway
        port = split.port or port
    path = split.path.strip("/")
    return f"{scheme}://{host}:{port}" + (f"/{path}" if path else "")


@dataclass(frozen=True, slots=True)
class Client:
    """A client's base-URL variables: forkpoint sets each to `URL/prefix` + `suffix` (what the
    client expects after the host: `/v1` for openai's), and the route `prefix` ("" is the
    default route) goes upstream; `read` turns a value the user set into a URL."""

    variables: tuple[str, ...]
    prefix: str
    suffix: str = ""
    read: Callable[[str], str] = _url


CLIENTS: tuple[Client, ...] = (
    # The openai SDKs, the Agents SDK, pydantic-ai and litellm read OPENAI_BASE_URL; LangChain
    # reads OPENAI_API_BASE first.
    Client(("OPENAI_BASE_URL", "OPENAI_API_BASE"), "", "/v1"),
    Client(("ANTHROPIC_BASE_URL",), "anthropic"),
    Client(("GOOGLE_GEMINI_BASE_URL",), "gemini"),  # google-genai, the Gemini API
    Client(("OLLAMA_HOST",), "ollama", read=ollama_host),
    Client(("CO_API_URL",), "cohere"),
    Client(("AZURE_OPENAI_ENDPOINT",), "azure"),  # openai's AzureOpenAI, LangChain's Azure
    Client(("GROQ_BASE_URL",), "groq"),
    Client(("CEREBRAS_BASE_URL",), "cerebras"),
)

# Placeholders so SDKs that insist on a key start up under replay, which needs none: the first
# variable of each group, unless the user set one of them.
REPLAY_KEYS: tuple[tuple[str, ...], ...] = (
    ("OPENAI_API_KEY",),
    ("ANTHROPIC_API_KEY",),
    ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    ("CO_API_KEY", "COHERE_API_KEY"),
    ("AZURE_OPENAI_API_KEY", "AZURE_OPENAI_AD_TOKEN"),
    ("GROQ_API_KEY",),
    ("CEREBRAS_API_KEY",),
)
REPLAY_KEY = "forkpoint-replay"


def agent_env(
    url: str, run_id: str, *, offline: bool, base: Mapping[str, str] = os.environ
) -> dict[str, str]:
    """`base` with every base-URL variable the known clients read set to the proxy; with
    `offline`, a placeholder key for each SDK that refuses to start without one."""
    env = dict(base)
    if offline:
        for group in REPLAY_KEYS:
            if not any(env.get(key) for key in group):
                env[group[0]] = REPLAY_KEY
    for client in CLIENTS:
        route = f"{url}/{client.prefix}" if client.prefix else url
        if _given(client, base) is None or _shaped(client, base):
            route += client.suffix
        env.update(dict.fromkeys(client.variables, route))
    env.update(FORKPOINT_URL=url, FORKPOINT_RUN=run_id)
    return env


def client_routes(
    base: Mapping[str, str] = os.environ, *, proxy: tuple[str, int] | None = None
) -> Routes:
    """The upstreams the user's own base-URL variables name, by route: what `agent_env`
    replaced goes on being served, through the proxy. One naming the proxy itself (`proxy`:
    its host and port, a variable left from `serve --port 8765`) is not followed."""
    default: str | None = None
    prefixes: dict[str, str] = {}
    for client in CLIENTS:
        given = _given(client, base)
        if given is None or (proxy is not None and _names(given, *proxy)):
            continue
        upstream = given.removesuffix(client.suffix) if _shaped(client, base) else given
        if client.prefix:
            prefixes[client.prefix] = upstream
        else:
            default = upstream
    return Routes(default, prefixes)


_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1", "0.0.0.0"})


def _names(url: str, host: str, port: int) -> bool:
    """Whether `url` is served by the proxy listening on `host:port` (port 0: none known)."""
    split = urlsplit(url)
    with contextlib.suppress(ValueError):
        if port and split.port == port:
            return split.hostname == host or {split.hostname, host} <= _LOOPBACK
    return False


def _given(client: Client, base: Mapping[str, str]) -> str | None:
    """The URL the user's environment gives the client (its first variable set), or None."""
    value = next((base[name] for name in client.variables if base.get(name, "").strip()), None)
    return None if value is None else client.read(value)


def _shaped(client: Client, base: Mapping[str, str]) -> bool:
    """Whether the user's URL ends as forkpoint's would (`…/v1`): the route then keeps the
    shape it has without one, so a recording matches whichever way it is replayed."""
    given = _given(client, base)
    return given is not None and bool(client.suffix) and given.endswith(client.suffix)
